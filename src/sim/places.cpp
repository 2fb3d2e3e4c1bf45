// Degenerate and repeated places: scenes where a scan cannot pin every direction of its
// pose (a tunnel, a road between flat walls, an open lot) or pins it equally well at several
// poses (a street of identical houses, parallel identical corridors), each with a straight
// drive along its axis whose speed changes, so that a constant-velocity prediction misses
// along the very direction the scan does not constrain.
#include <ndtcu/error.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/text.hpp>

#include "names.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

/// The box over [x0, x1] x [y0, y1] x [z0, z1].
OrientedBox box_between(double x0, double x1, double y0, double y1, double z0, double z1, float reflectivity) {
  return box(0.5 * (x0 + x1), 0.5 * (y0 + y1), 0.5 * (z0 + z1), 0.5 * (x1 - x0), 0.5 * (y1 - y0), 0.5 * (z1 - z0),
             reflectivity);
}

/// The largest k with every unit of width `pitch` centred at -k..k pitch inside +-half: the
/// repeated part of a place spans +-(k + 1/2) pitch. -1 when not even the middle one fits.
int repeated_units(double half, double pitch) { return static_cast<int>(std::floor((half - 0.5 * pitch) / pitch + 1e-9)); }

// HouseRow's plot, in metres (kHouseRowPitch and kHouseRowSetback in the header). A
// terraced house: 10 m along the street, 8 m deep, two storeys under a flat roof.
constexpr double kHouseLength = 10.0;
constexpr double kHouseDepth = 8.0;
constexpr double kHouseHeight = 6.0;
constexpr double kLightOffset = 6.5;   ///< street light at the road's edge, in front of each house
constexpr double kLightHeight = 6.0;   ///< a residential street light
constexpr double kTreeAlong = 7.5;     ///< tree in the 10 m gap after each house, 2.5 m from both houses
constexpr double kTreeAcross = 11.0;   ///< 3 m behind the building line, in the front garden's depth
constexpr double kRowGroundWidth = 60.0;  ///< ground to +-30 m: the plots (to 16 m) and a back garden

// ParallelCorridors' floor, in metres (pitch, spacing and count in the header).
constexpr double kCorridorWidth = 3.0;
constexpr double kCorridorHeight = 2.8;
constexpr double kWallThickness = 0.3;
constexpr double kDoorWidth = 1.0;    ///< an office door ...
constexpr double kDoorHeight = 2.1;   ///< ... its standard height ...
constexpr double kDoorDepth = 0.25;   ///< ... recessed this far into the left wall (less than the wall's thickness)
constexpr double kPillarWidth = 0.4;  ///< along the corridor
constexpr double kPillarDepth = 0.3;  ///< standing out of the right wall

/// Scene y of corridor k's centre line: the corridors are centred on the axis.
double corridor_y(int k) { return (k - 0.5 * (kCorridorCount - 1)) * kCorridorSpacing; }

/// Adds HouseRow's plots: both sides of the street the same, mirrored, one plot every pitch.
void add_house_row(Scene& scene, double half) {
  const int k_max = repeated_units(half, kHouseRowPitch);
  WindowGrid windows;
  windows.pitch = 2.5;  // three windows along the front, two along the sides
  windows.width = 1.2;
  windows.floor_height = 2.8;  // two storeys under the 6 m roof
  windows.height = 1.4;
  windows.sill = 0.9;
  windows.depth = 0.2;
  windows.margin = 1.0;
  windows.base_z = 0.0;
  windows.top_margin = 0.4;
  for (int k = -k_max; k <= k_max; ++k) {
    const double x = k * kHouseRowPitch;
    for (const double side : {-1.0, 1.0}) {
      FacadeBox house;
      house.box = box(x, side * (kHouseRowSetback + 0.5 * kHouseDepth), 0.5 * kHouseHeight, 0.5 * kHouseLength,
                      0.5 * kHouseDepth, 0.5 * kHouseHeight, 0.45f);
      house.windows = windows;
      scene.facades.push_back(house);
      Cylinder light;
      light.center = Eigen::Vector2d(x, side * kLightOffset);
      light.z_max = kLightHeight;
      light.radius = 0.1;
      light.reflectivity = 0.6f;
      scene.cylinders.push_back(light);
      Cylinder trunk;
      trunk.center = Eigen::Vector2d(x + kTreeAlong, side * kTreeAcross);
      trunk.z_max = 3.0;
      trunk.radius = 0.2;
      trunk.reflectivity = 0.3f;
      scene.cylinders.push_back(trunk);
      Sphere crown;
      crown.center = Eigen::Vector3d(x + kTreeAlong, side * kTreeAcross, 4.5);
      crown.radius = 1.8;  // stays in the gap: 0.7 m from each house
      crown.reflectivity = 0.35f;
      scene.spheres.push_back(crown);
    }
  }
  // One house, one light and one tree per plot.
  scene.contents.buildings = scene.facades.size();
  scene.contents.poles = scene.facades.size();
  scene.contents.trees = scene.spheres.size();
}

/// Adds ParallelCorridors' walls and ceiling. The corridors run over x in +-half, the
/// cross corridors over half < |x| < half + width; a corridor's walls are solid slabs (the
/// rooms behind them are never seen), its left wall built of segments between the door
/// recesses.
void add_parallel_corridors(Scene& scene, double half) {
  const double w = 0.5 * kCorridorWidth, t = kWallThickness, h = kCorridorHeight;
  const double y_min = corridor_y(0) - w - t, y_max = corridor_y(kCorridorCount - 1) + w + t;
  const double x_end = half + kCorridorWidth + t;  // the outer face of the cross corridors' far walls
  const int k_max = repeated_units(half, kCorridorPitch);
  for (int c = 0; c < kCorridorCount; ++c) {
    const double yc = corridor_y(c);
    // The outermost walls run on to close the ends of the cross corridors.
    const double right_end = c == 0 ? x_end : half, left_end = c == kCorridorCount - 1 ? x_end : half;
    // Right (-y) wall, flat, with a pillar standing out of it at the middle of every bay.
    scene.boxes.push_back(box_between(-right_end, right_end, yc - w - t, yc - w, 0.0, h, 0.4f));
    // Left (+y) wall: segments between the doors, the door at the back of each recess, a
    // lintel above it.
    double x = -left_end;
    for (int k = -k_max; k <= k_max; ++k) {
      const double xk = k * kCorridorPitch;
      scene.boxes.push_back(box_between(x, xk - 0.5 * kDoorWidth, yc + w, yc + w + t, 0.0, h, 0.4f));
      scene.boxes.push_back(box_between(xk - 0.5 * kDoorWidth, xk + 0.5 * kDoorWidth, yc + w + kDoorDepth,
                                        yc + w + kDoorDepth + t, 0.0, h, 0.25f));
      scene.boxes.push_back(
          box_between(xk - 0.5 * kDoorWidth, xk + 0.5 * kDoorWidth, yc + w, yc + w + t, kDoorHeight, h, 0.4f));
      scene.boxes.push_back(box_between(xk - 0.5 * kPillarWidth, xk + 0.5 * kPillarWidth, yc - w, yc - w + kPillarDepth,
                                        0.0, h, 0.5f));
      x = xk + 0.5 * kDoorWidth;
    }
    scene.boxes.push_back(box_between(x, left_end, yc + w, yc + w + t, 0.0, h, 0.4f));
  }
  // The cross corridors: a wall between each two corridors' ends facing them, a far wall.
  for (const double side : {-1.0, 1.0}) {
    for (int c = 0; c + 1 < kCorridorCount; ++c) {
      const double x0 = side > 0 ? half - t : -half, x1 = side > 0 ? half : -half + t;
      scene.boxes.push_back(box_between(x0, x1, corridor_y(c) + w, corridor_y(c + 1) - w, 0.0, h, 0.4f));
    }
    const double x0 = side > 0 ? half + kCorridorWidth : -x_end, x1 = side > 0 ? x_end : -half - kCorridorWidth;
    scene.boxes.push_back(box_between(x0, x1, y_min, y_max, 0.0, h, 0.4f));
  }
  // One ceiling slab over the whole floor.
  scene.boxes.push_back(box_between(-x_end, x_end, y_min, y_max, h, h + t, 0.3f));
  scene.contents.walls = scene.boxes.size();
}

}  // namespace

const std::vector<std::string>& place_names() {
  static const std::vector<std::string> names{"corridor", "walled-road", "open-lot", "house-row", "parallel-corridors"};
  return names;
}

const char* to_string(Place place) { return place_names()[static_cast<std::size_t>(place)].c_str(); }

Place place_from_string(const std::string& name) {
  return static_cast<Place>(detail::index_of_name(place_names(), name, "place"));
}

void validate(const PlaceSettings& s) {
  if (static_cast<int>(s.place) < 0 || static_cast<std::size_t>(s.place) >= place_names().size()) {
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
    case Place::HouseRow:
      scene.ground = flat_ground(s.length, kRowGroundWidth);
      add_house_row(scene, half);
      break;
    case Place::ParallelCorridors:
      // The floor under every corridor, the cross corridors and the walls.
      scene.ground = flat_ground(s.length, 2.0 * (corridor_y(kCorridorCount - 1) + 0.5 * kCorridorWidth + kWallThickness));
      add_parallel_corridors(scene, half);
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
  const bool indoors = s.place == Place::Corridor || s.place == Place::ParallelCorridors;
  const double height = indoors ? 1.5 : 1.8;  // a robot's sensor indoors, a car's roof outdoors
  const double lateral = s.place == Place::WalledRoad || s.place == Place::HouseRow ? -1.5  // the right-hand lane
                         : s.place == Place::ParallelCorridors                      ? corridor_y(1)
                                                                                    : 0.0;
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
    t.scene_from_sensor.translation() = Eigen::Vector3d(x, lateral, height);
    out.push_back(t);
  }
  return out;
}

std::vector<Eigen::Vector3d> place_repeats(const PlaceSettings& s, const Eigen::Vector3d& world_position,
                                           double clearance) {
  validate(s);
  if (!(clearance >= 0.0) || !std::isfinite(clearance)) {
    throw Error("place repeats: clearance must be finite and not negative, got " + ndtcu::number_text(clearance));
  }
  if (!world_position.allFinite()) throw Error("place repeats: the position must be finite");
  if (s.place != Place::HouseRow && s.place != Place::ParallelCorridors) return {world_position};
  Scene frame;  // the place's scene frame alone
  frame.origin = s.origin;
  frame.yaw = s.yaw;
  const Eigen::Isometry3d scene_to_world = world_from_scene(frame);
  const Eigen::Vector3d p = scene_to_world.inverse() * world_position;
  const double pitch = s.place == Place::HouseRow ? kHouseRowPitch : kCorridorPitch;
  const int units = repeated_units(0.5 * s.length, pitch);
  const double reach = (units + 0.5) * pitch - clearance;  // |scene x| of a clear sensor at most this
  // A sensor that sees an end of the repeated part sees what no copy sees.
  if (units < 0 || !(std::abs(p.x()) <= reach)) return {world_position};
  std::vector<double> ys{p.y()};
  if (s.place == Place::ParallelCorridors) {
    const double own = std::clamp(std::round(p.y() / kCorridorSpacing + 0.5 * (kCorridorCount - 1)), 0.0,
                                  kCorridorCount - 1.0);
    ys.clear();
    for (int c = 0; c < kCorridorCount; ++c) ys.push_back(p.y() + (c - own) * kCorridorSpacing);
  }
  // Whole pitches from p's own x (|p.x| <= reach, so both bounds are small), lowest first.
  const int lo = static_cast<int>(std::ceil((-reach - p.x()) / pitch - 1e-9));
  const int hi = static_cast<int>(std::floor((reach - p.x()) / pitch + 1e-9));
  std::vector<Eigen::Vector3d> out;
  for (const double y : ys) {
    for (int k = lo; k <= hi; ++k) out.push_back(scene_to_world * Eigen::Vector3d(p.x() + k * pitch, y, p.z()));
  }
  return out;
}

}  // namespace ndtcu::sim
