#pragma once
// The localizer settings the localization tests run with: the defaults on the CPU backend
// with 2 threads (the CI machine's cores).
#include <ndtcu/localizer.hpp>

namespace ndtcu::test {

inline LocalizerSettings cpu_localizer_settings() {
  LocalizerSettings s;
  s.align.threads = 2;
  s.align.backend = Backend::Cpu;
  return s;
}

}  // namespace ndtcu::test
