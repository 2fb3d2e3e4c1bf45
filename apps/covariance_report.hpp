#pragma once
// The calibration of a run's reported pose covariance (ndtcu/covariance_calibration.hpp) as
// JSON and as lines of text: `ndtcu eval covariance` prints them, and `ndtcu localize
// --reference` adds them to its summary.
#include <ndtcu/covariance_calibration.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace ndtcu::cli {

/// The calibration as JSON: frames, x-y and 6-D NEES, per entry, the far and confident
/// frames and the worst over-confident ones.
nlohmann::json covariance_calibration_json(const CovarianceCalibration& c);

/// The calibration as lines of text, each starting with `indent`.
std::string covariance_calibration_text(const CovarianceCalibration& c, const std::string& indent);

}  // namespace ndtcu::cli
