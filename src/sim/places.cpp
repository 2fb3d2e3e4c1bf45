// Degenerate places: scenes where a scan cannot pin every direction of its pose (a
// tunnel, a road between flat walls, an open lot), each with a straight drive along its
// axis whose speed changes, so that a constant-velocity prediction misses along the very
// direction the scan does not constrain.
#include <ndtcu/error.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/text.hpp>

#include "names.hpp"

#include <cmath>
#include <string>

namespace ndtcu::sim {

namespace {

constexpr double kPi = 3.14159265358979323846;

OrientedBox box(double cx, double cy, double cz, double hx, double hy, double hz, float reflectivity) {
  OrientedBox b;
  b.center = Eigen::Vector3d(cx, cy, cz);
  b.half_extents = Eigen::Vector3d(hx, hy, hz);
  b.reflectivity = reflectivity;
  return b;
}

// A flat ground grid of 1 m cells over [-l/2 - 10, l/2 + 10] x [-w/2, w/2] at height 0.
Heightfield flat_ground(double length, double width) {
  Heightfield g;
  g.cell = 1.0;
  g.nx = static_cast<int>(std::ceil(length + 20.0));
  g.ny = static_cast<int>(std::ceil(width));
  g.min_corner = Eigen::Vector2d(-0.5 * g.nx, -0.5 * g.ny);
  g.heights.assign(static_cast<std::size_t>(g.nx + 1) * static_cast<std::size_t>(g.ny + 1), 0.0f);
  return g;
}

}  // namespace

const std::vector<std::string>& place_names() {
  static const std::vector<std::string> names{"corridor", "walled-road", "open-lot"};
  return names;
}

const char* to_string(Place place) { return place_names()[static_cast<std::size_t>(place)].c_str(); }

Place place_from_string(const std::string& name) {
  return static_cast<Place>(detail::index_of_name(place_names(), name, "place"));
}

void validate(const PlaceSettings& s) {
  if (s.place != Place::Corridor && s.place != Place::WalledRoad && s.place != Place::OpenLot) {
    throw Error("place settings: place holds no known place (" + std::to_string(static_cast<int>(s.place)) + ")");
  }
  if (!(s.length >= 50.0 && s.length <= 2000.0)) {
    throw Error("place length must be in [50, 2000] m, got " + ndtcu::number_text(s.length));
  }
  if (!s.origin.allFinite() || !std::isfinite(s.yaw)) throw Error("place origin and yaw must be finite");
}

Scene generate_place(const PlaceSettings& s) {
  validate(s);
  Scene scene;
  scene.origin = s.origin;
  scene.yaw = s.yaw;
  const double half = 0.5 * s.length;
  // The walls run the whole length and beyond the ends of the drive (10 m each side), so
  // no scan sees an end: nothing along the axis to hold on to.
  switch (s.place) {
    case Place::Corridor: {
      // A service tunnel: 4 m wide, 3 m high, concrete walls, floor and ceiling.
      scene.ground = flat_ground(s.length, 4.0);
      const double w = 2.0, h = 3.0, t = 0.3;
      scene.boxes.push_back(box(0.0, w + t, 0.5 * h, half + 10.0, t, 0.5 * h + t, 0.4f));
      scene.boxes.push_back(box(0.0, -w - t, 0.5 * h, half + 10.0, t, 0.5 * h + t, 0.4f));
      scene.boxes.push_back(box(0.0, 0.0, h + t, half + 10.0, w + 2.0 * t, t, 0.3f));
      break;
    }
    case Place::WalledRoad: {
      // A straight road cut between two flat retaining walls 14 m apart, 4 m high, open above.
      scene.ground = flat_ground(s.length, 14.0);
      const double w = 7.0, h = 4.0, t = 0.4;
      scene.boxes.push_back(box(0.0, w + t, 0.5 * h, half + 10.0, t, 0.5 * h, 0.35f));
      scene.boxes.push_back(box(0.0, -w - t, 0.5 * h, half + 10.0, t, 0.5 * h, 0.35f));
      break;
    }
    case Place::OpenLot:
      // An empty paved lot, 120 m wide: a plane holds height, roll and pitch, nothing else.
      scene.ground = flat_ground(s.length, 120.0);
      break;
  }
  return scene;
}

Eigen::Vector3d place_axis(const Scene& scene) {
  return Eigen::Vector3d(std::cos(scene.yaw), std::sin(scene.yaw), 0.0);
}

std::vector<TrajectorySample> place_drive(const PlaceSettings& s, int frames, double rate_hz) {
  validate(s);
  if (frames < 1) throw Error("place drive: frames must be at least 1, got " + std::to_string(frames));
  if (!(rate_hz > 0.0 && rate_hz <= 1000.0)) throw Error("place drive: rate must be in (0, 1000] Hz");
  // Along the scene's x axis from 40% of the half length before the centre, at a speed that
  // swings between 2 and 8 m/s with a 6 s period: the constant-velocity prediction is off
  // along the axis by up to several decimetres at 10 Hz.
  const double height = s.place == Place::Corridor ? 1.5 : 1.8;
  const double start = -0.4 * s.length;
  const double mean_speed = 5.0, swing = 3.0, period = 6.0;
  std::vector<TrajectorySample> out;
  out.reserve(static_cast<std::size_t>(frames));
  for (int f = 0; f < frames; ++f) {
    TrajectorySample t;
    t.time = f / rate_hz;
    // distance = integral of mean + swing sin(2 pi t / T)
    t.distance = mean_speed * t.time + swing * period / (2.0 * kPi) * (1.0 - std::cos(2.0 * kPi * t.time / period));
    t.speed = mean_speed + swing * std::sin(2.0 * kPi * t.time / period);
    const double x = start + t.distance;
    if (x > 0.4 * s.length) {
      throw Error("place drive: " + std::to_string(frames) + " frames at " + ndtcu::number_text(rate_hz) + " Hz drive past the " +
                  ndtcu::number_text(s.length) + " m place; give fewer frames or a longer place");
    }
    t.scene_from_sensor = Eigen::Isometry3d::Identity();
    t.scene_from_sensor.translation() = Eigen::Vector3d(x, s.place == Place::WalledRoad ? -1.5 : 0.0, height);
    out.push_back(t);
  }
  return out;
}

}  // namespace ndtcu::sim
