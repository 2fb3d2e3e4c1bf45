#pragma once
// The localizer settings the localization tests run with: the defaults. They run them on
// the CPU backend with 2 threads (the CI machine's cores): test::on_cpu(2).
#include "../support/test_support.hpp"

#include <ndtcu/localizer.hpp>

namespace ndtcu::test {

inline LocalizerSettings cpu_localizer_settings() { return LocalizerSettings{}; }

}  // namespace ndtcu::test
