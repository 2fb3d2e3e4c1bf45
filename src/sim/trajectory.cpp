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
/// It starts at a random intersection, or on the street `first` (from, to) when given.
/// With `always_turn`, a street within 30 deg of straight ahead is taken only where no
/// other continues the route.
std::vector<int> make_route(const RoadNetwork& roads, Rng& rng, double needed, bool always_turn,
                            std::pair<int, int> first = {-1, -1}) {
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
  std::vector<int> route;
  double length = 0.0;
  int prev = -1;
  if (first.first >= 0) {
    route = {first.first, first.second};
    length = (roads.nodes[static_cast<std::size_t>(first.second)] - roads.nodes[static_cast<std::size_t>(first.first)]).norm();
    prev = first.first;
  } else {
    route = {starts[rng.below(static_cast<std::uint32_t>(starts.size()))]};
  }
  while (length < needed) {
    const int cur = route.back();
    std::vector<int> options;
    std::vector<double> weights;
    std::vector<bool> straight;
    for (int n : next[static_cast<std::size_t>(cur)]) {
      if (n == prev) continue;
      double w = 1.0;
      bool ahead = false;
      if (prev >= 0) {
        const Eigen::Vector2d a = (roads.nodes[static_cast<std::size_t>(cur)] - roads.nodes[static_cast<std::size_t>(prev)]).normalized();
        const Eigen::Vector2d b = (roads.nodes[static_cast<std::size_t>(n)] - roads.nodes[static_cast<std::size_t>(cur)]).normalized();
        if (a.dot(b) < -0.5) continue;  // sharper than 120 deg: no room for an arc in the lane
        ahead = a.dot(b) > 0.866;       // within 30 deg of straight ahead
        if (ahead) w = 2.0;             // twice as likely
      }
      options.push_back(n);
      weights.push_back(w);
      straight.push_back(ahead);
    }
    if (options.empty()) {
      throw Error("road network: node " + std::to_string(cur) + " is a dead end; the route cannot go on (" +
                  num(length) + " m of " + num(needed) + " m needed)");
    }
    if (always_turn && std::find(straight.begin(), straight.end(), false) != straight.end()) {
      // Straight on only where nothing turns.
      for (std::size_t k = options.size(); k-- > 0;) {
        if (straight[k]) {
          options.erase(options.begin() + static_cast<std::ptrdiff_t>(k));
          weights.erase(weights.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
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

/// A drive's dense samples in the lane, with their speeds and times.
struct Timeline {
  std::vector<PathPoint> path;
  std::vector<Eigen::Vector2d> pos;  ///< in the lane
  std::vector<double> dist;          ///< along the lane from the path's start (m)
  std::vector<double> speed;         ///< m/s
  std::vector<double> time;          ///< arrival (s), 0 at sample `first`
  std::vector<double> depart;        ///< departure (s): later than `time` at a stop only
  std::size_t first = 0;             ///< the first sample at least `start` along the lane
};

/// Lays the route into the lane, limits speed by curvature, acceleration and braking, makes
/// the vehicle stand `stop_seconds` at each stop, and times it from `start` metres on
/// (from a standstill there when `at_rest`).
Timeline make_timeline(const RoadNetwork& roads, const std::vector<int>& route, const std::vector<double>& cruise,
                       const TrajectorySettings& s, double start, bool at_rest) {
  Timeline d;
  d.path = dense_path(roads, route, cruise, s.turn_radius, roads.lane_offset);
  const std::vector<PathPoint>& path = d.path;
  // Shift into the lane, measure the shifted path, and limit speed by its curvature.
  const double offset = roads.lane_offset;
  const std::size_t n = path.size();
  d.pos.resize(n);
  d.dist.assign(n, 0.0);
  d.speed.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double h = path[i].heading;
    d.pos[i] = path[i].p + offset * Eigen::Vector2d(std::sin(h), -std::cos(h));  // to the right of travel
    if (i > 0) d.dist[i] = d.dist[i - 1] + (d.pos[i] - d.pos[i - 1]).norm();
    const double k = path[i].curvature / (1.0 + offset * path[i].curvature);  // radius R + offset on left turns
    d.speed[i] = path[i].cruise;
    if (k != 0.0) d.speed[i] = std::min(d.speed[i], std::sqrt(s.lateral_accel / std::abs(k)));
  }
  while (d.first + 1 < n && d.dist[d.first] < start) ++d.first;
  if (at_rest) d.speed[d.first] = 0.0;
  // Stops: the speed is zero at one sample each; the passes below brake into it and
  // accelerate out of it.
  std::vector<double> dwell(n, 0.0);
  if (s.first_stop > 0.0) {
    double at = d.dist[d.first] + s.first_stop;
    for (std::size_t i = d.first; i < n; ++i) {
      if (d.dist[i] < at) continue;
      d.speed[i] = 0.0;
      dwell[i] = s.stop_seconds;
      if (!(s.stop_interval > 0.0)) break;
      at += s.stop_interval;
    }
  }
  // Acceleration and braking limits: a forward then a backward pass over the samples.
  std::vector<double>& speed = d.speed;
  const std::vector<double>& dist = d.dist;
  for (std::size_t i = 1; i < n; ++i) {
    speed[i] = std::min(speed[i], std::sqrt(speed[i - 1] * speed[i - 1] + 2.0 * s.accel * (dist[i] - dist[i - 1])));
  }
  for (std::size_t i = n - 1; i-- > 0;) {
    speed[i] = std::min(speed[i], std::sqrt(speed[i + 1] * speed[i + 1] + 2.0 * s.brake * (dist[i + 1] - dist[i])));
  }
  // Time at each sample from the start point on (trapezoidal 1/v), and before it, back
  // to the path's start (negative).
  d.time.assign(n, 0.0);
  d.depart.assign(n, 0.0);
  for (std::size_t i = d.first + 1; i < n; ++i) {
    d.depart[i - 1] = d.time[i - 1] + dwell[i - 1];
    d.time[i] = d.depart[i - 1] + 2.0 * (dist[i] - dist[i - 1]) / (speed[i] + speed[i - 1]);
  }
  d.depart[n - 1] = d.time[n - 1] + dwell[n - 1];
  for (std::size_t i = d.first; i-- > 0;) {
    d.time[i] = d.time[i + 1] - 2.0 * (dist[i + 1] - dist[i]) / (speed[i] + speed[i + 1]) - dwell[i];
    d.depart[i] = d.time[i] + dwell[i];
  }
  return d;
}

/// The pose at time `t` of a timeline (scene frame), with the sample's speed and the
/// distance along the lane.
TrajectorySample sample_at(const World& world, const Timeline& d, const TrajectorySettings& s, double t, int frame,
                           std::size_t& i) {
  const std::size_t n = d.pos.size();
  while (i + 1 < n && d.time[i + 1] <= t) ++i;
  if (i + 1 >= n) throw Error("trajectory: the route ended before frame " + std::to_string(frame) + " (internal)");
  // Standing at a stop until its departure.
  const double u = t <= d.depart[i] ? 0.0 : (t - d.depart[i]) / (d.time[i + 1] - d.depart[i]);
  const Eigen::Vector2d p = d.pos[i] + u * (d.pos[i + 1] - d.pos[i]);
  const double yaw = d.path[i].heading + u * wrap_angle(d.path[i + 1].heading - d.path[i].heading);
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
  sample.speed = d.speed[i] + u * (d.speed[i + 1] - d.speed[i]);
  sample.distance = d.dist[i] + u * (d.dist[i + 1] - d.dist[i]) - d.dist[d.first];
  return sample;
}

/// Where a kidnapped sensor lands: a point of a street's lane, on the straight part that a
/// route starting at the street's first intersection drives first, exactly `distance` from
/// `from` (horizontally) and heading more than 45 deg away from `heading` (another street,
/// else the other direction of a parallel one), so that it is not where the drive was going
/// anyway. Only where no such lane lies at that distance (a long jump, which reaches few
/// streets; or one from near the world's edge), a lane in the drive's own direction on
/// another street than the drive's: a jump sideways, still away from where it was going.
struct Landing {
  std::pair<int, int> street{-1, -1};  ///< (from, to) intersections
  double along = 0.0;                  ///< centre-line distance from `from` (m)
};

Landing kidnap_landing(const RoadNetwork& roads, const TrajectorySettings& s, const Eigen::Vector2d& from,
                       double heading, Rng& rng) {
  // Another street first; the other direction of the street the drive is on only when no
  // other street lies at that distance; a parallel street in the drive's own direction only
  // when neither does.
  std::vector<Landing> candidates, reversed, parallel;
  const Eigen::Vector2d travel(std::cos(heading), std::sin(heading));
  for (const auto& [e0, e1] : roads.edges) {
    for (const auto& [a, b] : {std::pair<int, int>{e0, e1}, std::pair<int, int>{e1, e0}}) {
      const Eigen::Vector2d na = roads.nodes[static_cast<std::size_t>(a)], nb = roads.nodes[static_cast<std::size_t>(b)];
      const double len = (nb - na).norm();
      const Eigen::Vector2d dir = (nb - na) / len;
      // Past the first intersection as a fresh drive starts, and short of the fillet into
      // the next turn (its tangent length is at most turn_radius * tan(60 deg) < 2 radii).
      const double lo = kStartSkip, hi = len - 2.0 * s.turn_radius;
      if (hi <= lo) continue;
      // The lane line q(t) = q0 + t dir meets the circle |q - from| = distance.
      const Eigen::Vector2d q0 = na + roads.lane_offset * Eigen::Vector2d(dir.y(), -dir.x());
      std::vector<Landing>* list = &candidates;
      if (dir.dot(travel) > std::cos(kPi / 4.0)) {  // within 45 deg of the heading
        // The same lane line as the drive's (ahead or behind it) is where it was going.
        const Eigen::Vector2d off = from - q0;
        if (std::abs(off.x() * dir.y() - off.y() * dir.x()) < 1.0) continue;
        list = &parallel;
      } else if (dir.dot(travel) < -0.999) {
        list = &reversed;
      }
      const double bb = dir.dot(q0 - from), cc = (q0 - from).squaredNorm() - s.kidnap_distance * s.kidnap_distance;
      const double disc = bb * bb - cc;
      if (disc < 0.0) continue;
      for (const double t : {-bb - std::sqrt(disc), -bb + std::sqrt(disc)}) {
        if (t >= lo && t <= hi) list->push_back({{a, b}, t});
      }
    }
  }
  if (candidates.empty()) candidates = reversed;
  if (candidates.empty()) candidates = parallel;
  if (candidates.empty()) {
    throw Error("kidnap: no street lane lies " + num(s.kidnap_distance) + " m from the pose before frame " +
                std::to_string(s.kidnap_frame) +
                "; try another seed or frame, a shorter kidnap distance (--kidnap-distance) or a larger world");
  }
  return candidates[rng.below(static_cast<std::uint32_t>(candidates.size()))];
}

}  // namespace

void validate(const TrajectorySettings& s) {
  if (s.frames < 1 || s.frames > kMaxFrames) {
    throw Error("frames (--frames) must be between 1 and " + std::to_string(kMaxFrames) + ", got " + std::to_string(s.frames));
  }
  if (!(s.rate_hz > 0.0 && s.rate_hz <= 1000.0)) throw Error("rate (--rate) must be in (0, 1000] Hz, got " + num(s.rate_hz));
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
  // 10 m/s^2 is about 1 g: beyond what tyres on a road give.
  for (const auto& [name, value] : {std::pair<const char*, double>{"lateral acceleration", s.lateral_accel},
                                    {"acceleration", s.accel}, {"braking", s.brake}}) {
    if (!(value > 0.0 && value <= 10.0)) throw Error(std::string(name) + " must be in (0, 10] m/s^2, got " + num(value));
  }
  if (!(s.first_stop >= 0.0 && s.first_stop <= 1e6 && s.stop_interval >= 0.0 && s.stop_interval <= 1e6)) {
    throw Error("stop distances must be in [0, 1e6] m, got " + num(s.first_stop) + " and " + num(s.stop_interval));
  }
  if (s.stop_interval > 0.0 && s.stop_interval < 1.0) {
    throw Error("stop interval must be 0 (one stop) or at least 1 m, got " + num(s.stop_interval));
  }
  if (!(s.stop_seconds >= 0.0 && s.stop_seconds <= 3600.0)) {
    throw Error("stop time must be in [0, 3600] s, got " + num(s.stop_seconds));
  }
  if (s.kidnap_frame != -1 && (s.kidnap_frame < 1 || s.kidnap_frame >= s.frames)) {
    throw Error("kidnap frame must be -1 (none) or between 1 and frames - 1 = " + std::to_string(s.frames - 1) +
                " (--frames 2 or more), got " + std::to_string(s.kidnap_frame));
  }
  if (!(s.kidnap_distance > 0.0 && s.kidnap_distance <= 1000.0)) {
    throw Error("kidnap distance (--kidnap-distance) must be in (0, 1000] m, got " + num(s.kidnap_distance));
  }
}

struct Drive::Impl {
  const World* world = nullptr;
  TrajectorySettings s;
  Timeline drive;
  int until = 0;  // the first frame of the second drive (frames: none)
  // The second drive, after the kidnap: its time t0 passes the landing point, `landed`
  // metres along its lane; `distance_before` metres were driven up to frame until - 1.
  Timeline drive2;
  double t0 = 0.0, landed = 0.0, distance_before = 0.0;

  // sample_at() on `d` at time `t`, from the sample at or before it (at least `start`).
  TrajectorySample sample(const Timeline& d, std::size_t start, double t, int frame) const {
    const auto after = std::upper_bound(d.time.begin() + static_cast<std::ptrdiff_t>(start), d.time.end(), t);
    std::size_t i = after == d.time.begin() + static_cast<std::ptrdiff_t>(start)
                        ? start
                        : static_cast<std::size_t>(after - d.time.begin()) - 1;
    return sample_at(*world, d, s, t, frame, i);
  }
};

Drive::Drive(const World& world, const TrajectorySettings& s) : impl_(std::make_unique<Impl>()) {
  validate(s);
  const RoadNetwork& roads = world.scene().roads;
  if (roads.nodes.empty() || roads.edges.empty()) {
    throw Error("the scene has no road network to drive on: make it with generate_scene() or fill Scene::roads");
  }
  if (!(roads.lane_offset >= 0.0 && roads.lane_offset < 0.5 * s.turn_radius)) {
    throw Error("road network: lane offset " + num(roads.lane_offset) + " m must be in [0, turn radius / 2)");
  }
  Impl& m = *impl_;
  m.world = &world;
  m.s = s;
  Rng rng(detail::hash4(s.seed, detail::kStreamRoute, 0));
  const double duration = (s.frames - 1) / s.rate_hz;
  // The car never exceeds max_speed, so this much centre line always suffices; the extra
  // covers the start and the lane offset's shortening of left turns (and the last sweep:
  // kMaxSweepTime at max_speed is at most 20 m). Stops take time, not distance.
  const double needed = kStartSkip + duration * s.max_speed + 30.0;
  const std::vector<int> route = make_route(roads, rng, needed, s.always_turn);
  std::vector<double> cruise(route.size());
  for (double& v : cruise) v = rng.uniform(s.min_speed, s.max_speed);
  m.drive = make_timeline(roads, route, cruise, s, kStartSkip, s.start_at_rest);
  m.until = s.kidnap_frame > 0 ? s.kidnap_frame : s.frames;
  if (m.until == s.frames) return;

  // The kidnap: from frame kidnap_frame on, a second drive that starts on another street,
  // exactly kidnap_distance (horizontally) from the last pose before it.
  const Timeline& drive = m.drive;
  const double t_before = (m.until - 1) / s.rate_hz;
  std::size_t j = drive.first;
  while (j + 1 < drive.pos.size() && drive.time[j + 1] <= t_before) ++j;
  const double uj = t_before <= drive.depart[j] ? 0.0 : (t_before - drive.depart[j]) / (drive.time[j + 1] - drive.depart[j]);
  const Eigen::Vector2d from = drive.pos[j] + uj * (drive.pos[j + 1] - drive.pos[j]);  // in the lane, as sample_at
  const double heading = drive.path[j].heading + uj * wrap_angle(drive.path[j + 1].heading - drive.path[j].heading);
  Rng kidnap_rng(detail::hash4(s.seed, detail::kStreamKidnap, 0));
  const Landing landing = kidnap_landing(roads, s, from, heading, kidnap_rng);
  const double rest = (s.frames - m.until) / s.rate_hz;
  const std::vector<int> route2 =
      make_route(roads, kidnap_rng, landing.along + rest * s.max_speed + 30.0, s.always_turn, landing.street);
  std::vector<double> cruise2(route2.size());
  for (double& v : cruise2) v = kidnap_rng.uniform(s.min_speed, s.max_speed);
  m.drive2 = make_timeline(roads, route2, cruise2, s, landing.along, false);  // it goes on at speed
  // Time 0 of the second drive is where its lane passes the landing point: between the
  // samples around it, in proportion to the distance (on the straight the positions are
  // on one line, so the interpolated position is the landing point).
  const Timeline& drive2 = m.drive2;
  std::size_t k = 0;
  while (k + 2 < drive2.dist.size() && drive2.dist[k + 1] <= landing.along) ++k;
  const double w = (landing.along - drive2.dist[k]) / (drive2.dist[k + 1] - drive2.dist[k]);
  m.t0 = drive2.depart[k] + w * (drive2.time[k + 1] - drive2.depart[k]);
  m.landed = drive2.dist[k] + w * (drive2.dist[k + 1] - drive2.dist[k]) - drive2.dist[drive2.first];
  m.distance_before = at(m.until - 1).distance;
}

Drive::Drive(Drive&&) noexcept = default;
Drive& Drive::operator=(Drive&&) noexcept = default;
Drive::~Drive() = default;

int Drive::frames() const noexcept { return impl_->s.frames; }

TrajectorySample Drive::at(int frame, double offset) const {
  const Impl& m = *impl_;
  // Up to the next frame's time (the drive is continuous there: what an IMU samples), and
  // a sweep's longest beyond the last.
  const double limit = frame + 1 < m.s.frames ? std::max(kMaxSweepTime, 1.0 / m.s.rate_hz) : kMaxSweepTime;
  if (frame < 0 || frame >= m.s.frames || !(offset >= 0.0 && offset <= limit)) {
    throw Error("trajectory: no pose at frame " + std::to_string(frame) + " + " + num(offset) + " s (frames 0 to " +
                std::to_string(m.s.frames - 1) + ", offsets 0 to " + num(limit) + " s)");
  }
  // (An offset of 0 adds nothing: frame times are those of the drive without sweeps, bit
  // for bit.)
  if (frame < m.until) return m.sample(m.drive, m.drive.first, frame / m.s.rate_hz + offset, frame);
  TrajectorySample sample = m.sample(m.drive2, 0, m.t0 + (frame - m.until) / m.s.rate_hz + offset, frame);
  sample.time = frame / m.s.rate_hz + offset;
  // Metres driven: the jump is not driven.
  sample.distance = m.distance_before + sample.distance - m.landed;
  return sample;
}

std::vector<TrajectorySample> generate_trajectory(const World& world, const TrajectorySettings& s) {
  const Drive drive(world, s);
  std::vector<TrajectorySample> samples;
  samples.reserve(static_cast<std::size_t>(s.frames));
  for (int f = 0; f < s.frames; ++f) samples.push_back(drive.at(f));
  return samples;
}

}  // namespace ndtcu::sim
