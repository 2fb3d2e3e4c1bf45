// A drive through the street grid: a random route over intersections, filleted into
// lines and circular arcs, shifted into the right-hand lane, timed by a speed profile
// and set on the ground.
#include "random.hpp"
#include "world_data.hpp"

#include <ndtcu/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ndtcu::sim {

namespace {

using detail::Rng;

constexpr double kPi = 3.14159265358979323846;
constexpr double kStep = 0.1;              ///< spacing of the dense path samples (m)
constexpr double kStartSkip = 10.0;        ///< the drive starts this far past the first intersection (m)
constexpr double kLateralAccel = 2.0;      ///< comfortable cornering limit (m/s^2)
constexpr double kAccel = 1.2;             ///< gentle acceleration (m/s^2)
constexpr double kBrake = 2.0;             ///< comfortable braking (m/s^2)
constexpr double kHalfWheelbase = 1.4;     ///< 2.8 m wheelbase: a mid-size car
constexpr double kHalfTrack = 0.8;         ///< 1.6 m track
constexpr int kMaxFrames = 100000;         ///< 2.8 h at 10 Hz; the dense path stays under ~1.5M samples

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

double wrap_angle(double a) {
  while (a > kPi) a -= 2.0 * kPi;
  while (a < -kPi) a += 2.0 * kPi;
  return a;
}

/// One dense path sample.
struct PathPoint {
  Eigen::Vector2d p;   ///< centre-line position
  double heading;      ///< direction of travel (rad)
  double curvature;    ///< of the centre line, positive to the left (1/m)
  double cruise;       ///< cruise speed of the street it is on (m/s)
};

/// Random walk over intersections, no U-turns, until the centre line is `needed` long.
std::vector<int> make_route(const RoadNetwork& roads, Rng& rng, double needed) {
  std::vector<std::vector<int>> next(roads.nodes.size());
  for (const auto& [a, b] : roads.edges) {
    if (a < 0 || b < 0 || a >= static_cast<int>(roads.nodes.size()) || b >= static_cast<int>(roads.nodes.size()) || a == b) {
      throw Error("road network: edge " + std::to_string(a) + "-" + std::to_string(b) + " does not join two distinct nodes");
    }
    next[static_cast<std::size_t>(a)].push_back(b);
    next[static_cast<std::size_t>(b)].push_back(a);
  }
  std::vector<int> starts;
  for (std::size_t i = 0; i < next.size(); ++i) {
    if (!next[i].empty()) starts.push_back(static_cast<int>(i));
  }
  std::vector<int> route{starts[rng.below(static_cast<std::uint32_t>(starts.size()))]};
  double length = 0.0;
  int prev = -1;
  while (length < needed) {
    const int cur = route.back();
    std::vector<int> options;
    std::vector<double> weights;
    for (int n : next[static_cast<std::size_t>(cur)]) {
      if (n == prev) continue;
      double w = 1.0;
      if (prev >= 0) {
        const Eigen::Vector2d a = (roads.nodes[static_cast<std::size_t>(cur)] - roads.nodes[static_cast<std::size_t>(prev)]).normalized();
        const Eigen::Vector2d b = (roads.nodes[static_cast<std::size_t>(n)] - roads.nodes[static_cast<std::size_t>(cur)]).normalized();
        if (a.dot(b) < -0.5) continue;  // sharper than 120 deg: no room for an arc in the lane
        if (a.dot(b) > 0.866) w = 2.0;  // within 30 deg of straight ahead: twice as likely
      }
      options.push_back(n);
      weights.push_back(w);
    }
    if (options.empty()) {
      throw Error("road network: node " + std::to_string(cur) + " is a dead end; the route cannot go on (" +
                  num(length) + " m of " + num(needed) + " m needed)");
    }
    double total = 0.0;
    for (double w : weights) total += w;
    double pick = rng.uniform() * total;
    std::size_t k = 0;
    while (k + 1 < options.size() && pick >= weights[k]) pick -= weights[k++];
    length += (roads.nodes[static_cast<std::size_t>(options[k])] - roads.nodes[static_cast<std::size_t>(cur)]).norm();
    prev = cur;
    route.push_back(options[k]);
  }
  return route;
}

/// Samples the route's centre line every kStep metres: straight runs joined by circular
/// arcs of radius `radius` (smaller where a street is too short for it).
std::vector<PathPoint> dense_path(const RoadNetwork& roads, const std::vector<int>& route, const std::vector<double>& cruise,
                                  double radius, double lane_offset) {
  const std::size_t n = route.size();
  auto node = [&](std::size_t k) { return roads.nodes[static_cast<std::size_t>(route[k])]; };
  // Per interior node: the turn angle and the fillet's tangent length and radius.
  std::vector<double> turn(n, 0.0), tangent(n, 0.0), fillet_r(n, 0.0);
  for (std::size_t k = 1; k + 1 < n; ++k) {
    const Eigen::Vector2d a = node(k) - node(k - 1), b = node(k + 1) - node(k);
    const double theta = std::atan2(a.x() * b.y() - a.y() * b.x(), a.dot(b));
    if (std::abs(theta) < 1e-9) continue;
    const double half_tan = std::tan(0.5 * std::abs(theta));
    const double r = std::min(radius, 0.5 * std::min(a.norm(), b.norm()) / half_tan);
    if (r < 2.0 * lane_offset) {
      // The lane's arc on the inside of the turn would shrink to nothing or loop.
      throw Error("road network: the streets at node " + std::to_string(route[k]) + " are too short for a turn of radius " +
                  num(2.0 * lane_offset) + " m or more");
    }
    turn[k] = theta;
    fillet_r[k] = r;
    tangent[k] = r * half_tan;
  }
  std::vector<PathPoint> out;
  double carry = 0.0;  // distance into the next piece where the next sample falls
  auto line = [&](const Eigen::Vector2d& p0, const Eigen::Vector2d& p1, double v) {
    const double len = (p1 - p0).norm();
    if (len <= 0.0) return;
    const Eigen::Vector2d dir = (p1 - p0) / len;
    const double heading = std::atan2(dir.y(), dir.x());
    double s = carry;
    for (; s < len; s += kStep) out.push_back({p0 + s * dir, heading, 0.0, v});
    carry = s - len;
  };
  auto arc = [&](const Eigen::Vector2d& start, double heading0, double theta, double r, double v) {
    const double len = std::abs(theta) * r;
    const double sign = theta > 0 ? 1.0 : -1.0;
    const Eigen::Vector2d left(-std::sin(heading0), std::cos(heading0));
    const Eigen::Vector2d centre = start + sign * r * left;
    double s = carry;
    for (; s < len; s += kStep) {
      const double h = heading0 + sign * s / r;
      // Rotating the start point about the centre by the heading change.
      const double phi = sign * s / r;
      const Eigen::Vector2d rel = start - centre;
      const Eigen::Vector2d p = centre + Eigen::Vector2d(std::cos(phi) * rel.x() - std::sin(phi) * rel.y(),
                                                         std::sin(phi) * rel.x() + std::cos(phi) * rel.y());
      out.push_back({p, h, sign / r, v});
    }
    carry = s - len;
  };
  for (std::size_t k = 0; k + 1 < n; ++k) {
    const Eigen::Vector2d a = node(k), b = node(k + 1);
    const Eigen::Vector2d dir = (b - a).normalized();
    line(a + tangent[k] * dir, b - tangent[k + 1] * dir, cruise[k]);
    if (k + 2 < n && turn[k + 1] != 0.0) {
      arc(b - tangent[k + 1] * dir, std::atan2(dir.y(), dir.x()), turn[k + 1], fillet_r[k + 1],
          std::min(cruise[k], cruise[k + 1]));
    }
  }
  return out;
}

}  // namespace

void validate(const TrajectorySettings& s) {
  if (s.frames < 1 || s.frames > kMaxFrames) {
    throw Error("frames (--frames) must be between 1 and " + std::to_string(kMaxFrames) + ", got " + std::to_string(s.frames));
  }
  if (!(s.rate_hz > 0.0 && s.rate_hz <= 1000.0)) throw Error("trajectory rate must be in (0, 1000] Hz, got " + num(s.rate_hz));
  if (!(s.sensor_height > 0.0 && s.sensor_height <= 10.0)) {
    throw Error("sensor height must be in (0, 10] m, got " + num(s.sensor_height));
  }
  if (!(s.min_speed > 0.0 && s.max_speed >= s.min_speed && s.max_speed <= 40.0)) {
    throw Error("speeds must satisfy 0 < min_speed <= max_speed <= 40 m/s, got " + num(s.min_speed) + " and " +
                num(s.max_speed));
  }
  if (!(s.turn_radius >= 3.0 && s.turn_radius <= 50.0)) {
    throw Error("turn radius must be between 3 and 50 m, got " + num(s.turn_radius));
  }
}

std::vector<TrajectorySample> generate_trajectory(const World& world, const TrajectorySettings& s) {
  validate(s);
  const RoadNetwork& roads = world.scene().roads;
  if (roads.nodes.empty() || roads.edges.empty()) {
    throw Error("the scene has no road network to drive on: make it with generate_scene() or fill Scene::roads");
  }
  if (!(roads.lane_offset >= 0.0 && roads.lane_offset < 0.5 * s.turn_radius)) {
    throw Error("road network: lane offset " + num(roads.lane_offset) + " m must be in [0, turn radius / 2)");
  }
  Rng rng(detail::hash4(s.seed, detail::kStreamRoute, 0));
  const double duration = (s.frames - 1) / s.rate_hz;
  // The car never exceeds max_speed, so this much centre line always suffices; the extra
  // covers the start and the lane offset's shortening of left turns.
  const double needed = kStartSkip + duration * s.max_speed + 30.0;
  const std::vector<int> route = make_route(roads, rng, needed);
  std::vector<double> cruise(route.size());
  for (double& v : cruise) v = rng.uniform(s.min_speed, s.max_speed);
  std::vector<PathPoint> path = dense_path(roads, route, cruise, s.turn_radius, roads.lane_offset);

  // Shift into the lane, measure the shifted path, and limit speed by its curvature.
  const double offset = roads.lane_offset;
  const std::size_t n = path.size();
  std::vector<Eigen::Vector2d> pos(n);
  std::vector<double> dist(n, 0.0), speed(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double h = path[i].heading;
    pos[i] = path[i].p + offset * Eigen::Vector2d(std::sin(h), -std::cos(h));  // to the right of travel
    if (i > 0) dist[i] = dist[i - 1] + (pos[i] - pos[i - 1]).norm();
    const double k = path[i].curvature / (1.0 + offset * path[i].curvature);  // radius R + offset on left turns
    speed[i] = path[i].cruise;
    if (k != 0.0) speed[i] = std::min(speed[i], std::sqrt(kLateralAccel / std::abs(k)));
  }
  // Acceleration and braking limits: a forward then a backward pass over the samples.
  for (std::size_t i = 1; i < n; ++i) {
    speed[i] = std::min(speed[i], std::sqrt(speed[i - 1] * speed[i - 1] + 2.0 * kAccel * (dist[i] - dist[i - 1])));
  }
  for (std::size_t i = n - 1; i-- > 0;) {
    speed[i] = std::min(speed[i], std::sqrt(speed[i + 1] * speed[i + 1] + 2.0 * kBrake * (dist[i + 1] - dist[i])));
  }
  // Time at each sample from the start point on (trapezoidal 1/v).
  std::size_t first = 0;
  while (first + 1 < n && dist[first] < kStartSkip) ++first;
  std::vector<double> time(n, 0.0);
  for (std::size_t i = first + 1; i < n; ++i) {
    time[i] = time[i - 1] + 2.0 * (dist[i] - dist[i - 1]) / (speed[i] + speed[i - 1]);
  }

  std::vector<TrajectorySample> samples;
  samples.reserve(static_cast<std::size_t>(s.frames));
  std::size_t i = first;
  for (int f = 0; f < s.frames; ++f) {
    const double t = f / s.rate_hz;
    while (i + 1 < n && time[i + 1] <= t) ++i;
    if (i + 1 >= n) throw Error("trajectory: the route ended before frame " + std::to_string(f) + " (internal)");
    const double u = (t - time[i]) / (time[i + 1] - time[i]);
    const Eigen::Vector2d p = pos[i] + u * (pos[i + 1] - pos[i]);
    const double yaw = path[i].heading + u * wrap_angle(path[i + 1].heading - path[i].heading);
    // The body rests on four wheel contacts: pitch from front and rear, roll from left
    // and right, height from their mean.
    const Eigen::Vector2d fwd(std::cos(yaw), std::sin(yaw)), left(-std::sin(yaw), std::cos(yaw));
    auto ground = [&](const Eigen::Vector2d& q) {
      const double h = world.ground_height(q.x(), q.y());
      if (!std::isfinite(h)) throw Error("trajectory leaves the ground at " + num(q.x()) + ", " + num(q.y()));
      return h;
    };
    const double h_front = ground(p + kHalfWheelbase * fwd), h_rear = ground(p - kHalfWheelbase * fwd);
    const double h_left = ground(p + kHalfTrack * left), h_right = ground(p - kHalfTrack * left);
    const double pitch = std::atan2(h_rear - h_front, 2.0 * kHalfWheelbase);  // nose up is negative about +y
    const double roll = std::atan2(h_left - h_right, 2.0 * kHalfTrack);       // left side up is positive about +x
    const double z = 0.25 * (h_front + h_rear + h_left + h_right);
    Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
    pose.linear() = (Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()) * Eigen::AngleAxisd(pitch, Eigen::Vector3d::UnitY()) *
                     Eigen::AngleAxisd(roll, Eigen::Vector3d::UnitX()))
                        .toRotationMatrix();
    pose.translation() = Eigen::Vector3d(p.x(), p.y(), z) + pose.linear() * Eigen::Vector3d(0.0, 0.0, s.sensor_height);
    TrajectorySample sample;
    sample.time = t;
    sample.scene_from_sensor = pose;
    sample.speed = speed[i] + u * (speed[i + 1] - speed[i]);
    sample.distance = dist[i] + u * (dist[i + 1] - dist[i]) - dist[first];
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace ndtcu::sim
