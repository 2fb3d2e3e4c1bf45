// Global localization (include/ndtcu/global_search.hpp): a branch and bound over x, y, z
// and yaw on the map's likelihood pyramid, then the NDT alignment of its best distinct
// leaves with find_initial_pose()'s ambiguity check.
#include <ndtcu/error.hpp>
#include <ndtcu/global_search.hpp>

#include "../log.hpp"
#include "../nvtx.hpp"
#include "../thread_pool.hpp"
#include "pose_search.hpp"
#include "pyramid_scorer.hpp"
#include "score_pyramid.hpp"

#include <fmt/format.h>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <unordered_set>

namespace ndtcu {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

// Two leaves are one place for the candidates when they are within this many cells on
// every axis and this yaw of each other: neighbouring leaves of one basin, which the NDT
// alignment would bring to the same pose.
constexpr int kSameCells = 2;
constexpr double kSameYawDeg = 10.0;

// Points on the scan's ground plane: within this distance (m) of it.
constexpr double kGroundBand = 0.25;
// The bands of the search: each next floor this share of the one before, the first this
// share of the best top node's bound. Above the default prune ratio, so that every node
// expanded bounds more than the threshold a best-first search ends with.
constexpr double kBand = 0.95;
// Dives before the bands (the top nodes of highest bound, followed down to a leaf each):
// the best leaf they reach sets a first threshold, so that the store holds fewer nodes; the
// leaves themselves are found again by the bands where they are candidates.
constexpr std::size_t kDives = 1024;
// A scan with fewer points than this for the bounds is no evidence of a place.
constexpr std::size_t kMinPoints = 16;

// The ground the sensor stands on, for the standing heights: the plane of the scan's points
// within this range (m). The whole scan's plane is the street's only where the terrain is
// flat: on a simulated city with gently sloping streets, 20 of 50 scans found no plane
// holding a tenth of their points, and all 50 found their street within 15 m. It does not
// level the scan: on the Livox set a near plane that was not the ground tilted scan 421 out
// of its place, which the whole scan's plane (none there) had found.
constexpr double kGroundRange = 20.0;
// The near plane gives the standing height only when its normal lies within this angle of
// the up direction the scan is leveled by.
constexpr double kStandingTiltDeg = 5.0;

ScanGround local_ground(PointCloudView scan) {
  PointCloud near;
  const double range2 = kGroundRange * kGroundRange;
  for (std::size_t i = 0; i < scan.size(); ++i) {
    const Eigen::Vector3d x = scan[i].cast<double>() + scan.origin;
    if (x.squaredNorm() <= range2) near.points.push_back(x.cast<float>());
  }
  return estimate_ground(near);
}

using detail::ScoredNode;

}  // namespace

void validate(const GlobalSearchOptions& o) {
  const auto fail = [](const char* field, double value, const char* rule) {
    throw Error(fmt::format("GlobalSearchOptions::{} = {}: {}", field, value, rule));
  };
  if (!(std::isfinite(o.cell) && (o.cell == 0.0 || (o.cell >= 0.05 && o.cell <= 10.0)))) {
    fail("cell", o.cell, "must be 0 (chosen from the map) or lie in [0.05, 10] (m)");
  }
  if (o.levels < 0 || o.levels > 9) fail("levels", o.levels, "must lie in [0, 9] (0: chosen from the map)");
  if (!(std::isfinite(o.yaw_step_deg) && o.yaw_step_deg >= 0.0 && o.yaw_step_deg <= 45.0)) {
    fail("yaw_step_deg", o.yaw_step_deg, "must lie in [0, 45] (deg; 0: chosen from the scan)");
  }
  if (o.points < kMinPoints || o.points > 65536) fail("points", static_cast<double>(o.points), "must lie in [16, 65536]");
  if (!(std::isfinite(o.max_point_range) && o.max_point_range > 0.0)) {
    fail("max_point_range", o.max_point_range, "must be finite and > 0 (m)");
  }
  if (!(o.max_ground_share >= 0.0 && o.max_ground_share <= 1.0)) {
    fail("max_ground_share", o.max_ground_share, "must lie in [0, 1]");
  }
  if (o.candidates < 1 || o.candidates > 4096) fail("candidates", static_cast<double>(o.candidates), "must lie in [1, 4096]");
  if (!(o.prune_ratio >= 0.0 && o.prune_ratio <= 1.0)) fail("prune_ratio", o.prune_ratio, "must lie in [0, 1]");
  if (o.batch_nodes < 64) fail("batch_nodes", static_cast<double>(o.batch_nodes), "must be >= 64");
  if (o.max_nodes < 1) fail("max_nodes", 0.0, "must be >= 1");
  if (!(std::isfinite(o.standing_tolerance) && o.standing_tolerance >= 0.0)) {
    fail("standing_tolerance", o.standing_tolerance, "must be finite and >= 0 (m)");
  }
  if (o.max_cells < 1) fail("max_cells", 0.0, "must be >= 1");
  if (!(std::isfinite(o.tilt_deg) && o.tilt_deg >= 0.0 && o.tilt_deg <= 30.0)) {
    fail("tilt_deg", o.tilt_deg, "must lie in [0, 30] (deg; 0: 4-DoF)");
  }
  if (!(std::isfinite(o.tilt_step_deg) && o.tilt_step_deg >= 0.5 && o.tilt_step_deg <= 15.0)) {
    fail("tilt_step_deg", o.tilt_step_deg, "must lie in [0.5, 15] (deg)");
  }
  validate(o.refine);
}

const char* found_state(InitialPoseVerdict v) {
  switch (v) {
    case InitialPoseVerdict::Found: return "found";
    case InitialPoseVerdict::Ambiguous: return "ambiguous";
    default: return "not_found";
  }
}

struct InitialPoseSearch::Impl {
  Aligner* aligner = nullptr;
  Aligner* fine = nullptr;  // set_fine()
  GlobalSearchOptions options;
  detail::ScorePyramid pyramid;
  Eigen::Vector3d map_origin = Eigen::Vector3d::Zero();
  std::unique_ptr<detail::ThreadPool> pool;
  std::unique_ptr<detail::PyramidScorer> scorer;
  std::size_t batch_nodes = 0;
  std::size_t descent_parents = 0;  // parents a depth-first step pops
  double build_ms = 0.0;

  InitialPoseResult find(PointCloudView scan, const GlobalSearchQuery& q);
  void polish(PointCloudView scan, InitialPoseResult& r) const;
};

InitialPoseSearch::InitialPoseSearch(Aligner& aligner, const GlobalSearchOptions& options)
    : impl_(std::make_unique<Impl>()) {
  NDTCU_NVTX_RANGE("InitialPoseSearch::build");
  const auto t0 = std::chrono::steady_clock::now();
  validate(options);
  if (!aligner.has_target()) {
    throw Error("global search: the aligner has no target map (call Aligner::set_target first)");
  }
  const std::shared_ptr<const VoxelMap>& map = aligner.target();
  if (!map) throw Error("global search: the aligner's map is held on the device only (a streamed tiled map)");
  Impl& m = *impl_;
  m.aligner = &aligner;
  m.options = options;
  m.map_origin = map->origin();
  const int threads = detail::resolve_thread_count(aligner.execution().threads);
  if (threads > 1) m.pool = std::make_unique<detail::ThreadPool>(threads);
  // The cell: the options', or 1 m unless the map's extent at 1 m holds more than
  // kAutoCellLimit cells, then 2 m (GlobalSearchOptions::cell).
  double cell = options.cell;
  if (cell == 0.0) cell = detail::score_pyramid_cells(*map, 1.0) > kAutoCellLimit ? 2.0 : 1.0;
  m.pyramid = detail::build_score_pyramid(*map, cell, options.levels, options.max_cells, m.pool.get(),
                                          options.standing);
  if (aligner.backend() == Backend::Cuda) {
    m.scorer = detail::make_cuda_pyramid_scorer(m.pyramid, aligner.execution().cuda_stream, aligner.execution().device);
    m.batch_nodes = options.batch_nodes;
    // A step's children, 8 per parent, fill the device (a launch and a round trip cost
    // tens of microseconds, a million children's bounds a few hundred).
    m.descent_parents = options.batch_nodes;
  } else {
    m.scorer = detail::make_cpu_pyramid_scorer(m.pyramid, m.pool.get());
    // The host gains nothing from large batches, and a smaller one prunes sooner.
    m.batch_nodes = std::min<std::size_t>(options.batch_nodes, 2048);
    m.descent_parents = m.batch_nodes / 8;
  }
  m.build_ms = detail::ms_since(t0);
  detail::log().debug("global search: pyramid {} x {} x {} cells of {} m, {} levels, {:.0f} MB, {:.1f} ms", m.pyramid.nx,
                      m.pyramid.ny, m.pyramid.nz, m.pyramid.cell, m.pyramid.level_count,
                      static_cast<double>(m.pyramid.memory_bytes()) / 1e6, m.build_ms);
}

InitialPoseSearch::~InitialPoseSearch() = default;
InitialPoseSearch::InitialPoseSearch(InitialPoseSearch&&) noexcept = default;
InitialPoseSearch& InitialPoseSearch::operator=(InitialPoseSearch&&) noexcept = default;

const GlobalSearchOptions& InitialPoseSearch::options() const noexcept { return impl_->options; }
double InitialPoseSearch::cell() const noexcept { return impl_->pyramid.cell; }
void InitialPoseSearch::set_fine(Aligner* fine) { impl_->fine = fine; }
double InitialPoseSearch::build_ms() const noexcept { return impl_->build_ms; }
std::size_t InitialPoseSearch::memory_bytes() const noexcept { return impl_->pyramid.memory_bytes(); }

InitialPoseResult InitialPoseSearch::find(PointCloudView scan, const GlobalSearchQuery& query) {
  NDTCU_NVTX_RANGE("InitialPoseSearch::find");
  return impl_->find(scan, query);
}

InitialPoseResult InitialPoseSearch::Impl::find(PointCloudView scan, const GlobalSearchQuery& q) {
  const auto t0 = std::chrono::steady_clock::now();
  const GlobalSearchOptions& o = options;
  if (q.up && !(q.up->allFinite() && q.up->norm() > 0.5)) {
    throw Error("global search: the query's up direction must be a finite non-zero vector");
  }
  if (q.around && !q.around->allFinite()) throw Error("global search: the query's around pose is not finite");
  if (q.around && !(std::isfinite(q.radius) && q.radius > 0.0)) {
    throw Error(fmt::format("global search: the query's radius {} must be finite and > 0 (m)", q.radius));
  }
  InitialPoseResult result;
  GlobalSearchStats& st = result.global;
  const detail::ScorePyramid& p = pyramid;
  const double cell = p.cell;

  // The scan leveled: its up onto the map's z (from the query, else its ground plane).
  const ScanGround ground = estimate_ground(scan);
  Eigen::Vector3d up = Eigen::Vector3d::UnitZ();
  if (q.up) {
    up = q.up->normalized();
  } else if (ground.found) {
    up = ground.up;
    result.leveled = true;
  }
  const Eigen::Matrix3d level = Eigen::Quaterniond::FromTwoVectors(up, Eigen::Vector3d::UnitZ()).toRotationMatrix();
  // The sensor's height above its ground, measured along the leveled z (the plane's
  // distance when the plane is the up direction).
  const double height = ground.found ? ground.height * std::abs(ground.up.dot(up)) : 0.0;
  st.sensor_height = height;

  // The points of the bounds: one per cell of a leaf-sized voxel grid, within range,
  // the ground's share capped.
  std::vector<Eigen::Vector3d> structure, flat;
  {
    std::unordered_set<std::uint64_t> seen;
    const double range2 = o.max_point_range * o.max_point_range;
    for (std::size_t i = 0; i < scan.size(); ++i) {
      const Eigen::Vector3d x = level * (scan[i].cast<double>() + scan.origin);
      const double r2 = x.squaredNorm();
      if (!x.allFinite() || r2 > range2 || r2 < 0.25) continue;
      const auto key = [&](int a) { return static_cast<std::uint64_t>(static_cast<std::int64_t>(std::floor(x(a) / cell)) & 0x1fffff); };
      if (!seen.insert(key(0) | key(1) << 21 | key(2) << 42).second) continue;
      (ground.found && std::abs(x.z() + height) < kGroundBand ? flat : structure).push_back(x);
    }
  }
  const auto every_kth = [](const std::vector<Eigen::Vector3d>& from, std::size_t n, std::vector<Eigen::Vector3d>& to) {
    if (n == 0 || from.empty()) return;
    const double step = static_cast<double>(from.size()) / static_cast<double>(std::min(n, from.size()));
    for (double k = 0.0; static_cast<std::size_t>(k) < from.size() && n > 0; k += step, --n) {
      to.push_back(from[static_cast<std::size_t>(k)]);
    }
  };
  std::vector<Eigen::Vector3d> pts;
  {
    const std::size_t ground_cap = static_cast<std::size_t>(std::floor(o.max_ground_share * static_cast<double>(o.points)));
    const std::size_t n_struct = std::min(structure.size(), o.points - std::min(flat.size(), ground_cap));
    const std::size_t n_flat = std::min(flat.size(), o.points - n_struct);
    every_kth(structure, n_struct, pts);
    every_kth(flat, n_flat, pts);
  }
  st.cell = cell;
  st.points = pts.size();
  st.levels = p.level_count;
  if (pts.size() < kMinPoints) {
    // Nothing to search with: an empty scan, or one that shows only its ground.
    result.best.source_points = scan.size();
    result.best.reason = scan.size() == 0 ? StopReason::EmptySource : StopReason::NoCorrespondence;
    result.time_ms = detail::ms_since(t0);
    return result;
  }

  // Yaws: by default the step that moves the 80th-percentile range by one cell.
  double step_deg = o.yaw_step_deg;
  if (step_deg == 0.0) {
    std::vector<double> ranges;
    for (const Eigen::Vector3d& x : pts) ranges.push_back(x.head<2>().norm());
    std::nth_element(ranges.begin(), ranges.begin() + static_cast<std::ptrdiff_t>(ranges.size() * 8 / 10), ranges.end());
    const double r80 = std::max(cell, ranges[ranges.size() * 8 / 10]);
    step_deg = std::clamp(cell / r80 / kDeg, 1.0, 6.0);
  }
  const int yaws = static_cast<int>(std::ceil(360.0 / step_deg - 1e-9));
  step_deg = 360.0 / yaws;
  st.yaws = static_cast<std::size_t>(yaws);
  st.yaw_step_deg = step_deg;
  // The attitudes about the leveled one (6-DoF: roll and pitch on a grid within a disc of
  // tilt_deg; 4-DoF: the leveled one alone). A node's rotation index r is tilt r / yaws and
  // yaw r % yaws.
  std::vector<Eigen::Matrix3d> tilts{Eigen::Matrix3d::Identity()};
  if (o.tilt_deg > 0.0) {
    const int n = static_cast<int>(std::floor(o.tilt_deg / o.tilt_step_deg + 1e-9));
    for (int a = -n; a <= n; ++a) {
      for (int b = -n; b <= n; ++b) {
        if ((a == 0 && b == 0) || std::hypot(a, b) * o.tilt_step_deg > o.tilt_deg + 1e-9) continue;
        tilts.push_back((Eigen::AngleAxisd(a * o.tilt_step_deg * kDeg, Eigen::Vector3d::UnitX()) *
                         Eigen::AngleAxisd(b * o.tilt_step_deg * kDeg, Eigen::Vector3d::UnitY())).toRotationMatrix());
      }
    }
  }
  st.tilts = tilts.size();
  const std::size_t rotation_count = tilts.size() * static_cast<std::size_t>(yaws);
  if (rotation_count > 65535) {
    throw Error(fmt::format("global search: {} tilts x {} yaws make {} attitudes, more than 65535; raise "
                            "GlobalSearchOptions::tilt_step_deg or yaw_step_deg",
                            tilts.size(), yaws, rotation_count));
  }
  const int rotations = static_cast<int>(rotation_count);
  const auto rotation = [&](int r) -> Eigen::Matrix3d {
    return Eigen::AngleAxisd((r % yaws) * step_deg * kDeg, Eigen::Vector3d::UnitZ()).toRotationMatrix() *
           tilts[static_cast<std::size_t>(r / yaws)];
  };
  const int n_pts = static_cast<int>(pts.size());
  std::vector<std::int32_t> offsets(rotation_count * static_cast<std::size_t>(n_pts) * 3);
  for (int r = 0; r < rotations; ++r) {
    const Eigen::Matrix3d rot = rotation(r);
    for (int i = 0; i < n_pts; ++i) {
      const Eigen::Vector3d x = rot * pts[static_cast<std::size_t>(i)];
      std::int32_t* out = offsets.data() + (static_cast<std::size_t>(r) * static_cast<std::size_t>(n_pts) + static_cast<std::size_t>(i)) * 3;
      for (int a = 0; a < 3; ++a) out[a] = static_cast<std::int32_t>(std::floor(x(a) / cell));
    }
  }
  scorer->set_points(offsets, n_pts, rotations);

  // Where the sensor may stand: heights above a floor of the map near its own.
  std::uint8_t standing_bits = 0;
  const ScanGround near_ground = o.standing ? local_ground(scan) : ScanGround{};
  const bool standing_known = near_ground.found && near_ground.up.dot(up) >= std::cos(kStandingTiltDeg * kDeg);
  if (standing_known) {
    const double above = near_ground.height * near_ground.up.dot(up);
    // From the sensor's cell itself (0: a sensor beside a surface whose smoothed
    // likelihood reaches its cell) to a cell above the tolerance.
    const int lo = std::max(0, static_cast<int>(std::floor((above - o.standing_tolerance) / cell)) - 1);
    const int hi = std::min(detail::kFloorHeights - 1, static_cast<int>(std::ceil((above + o.standing_tolerance) / cell)));
    for (int h = lo; h <= hi; ++h) standing_bits = static_cast<std::uint8_t>(standing_bits | (1u << h));
  }
  st.standing = standing_bits != 0;
  const math::PyramidView stand = p.standing_view();
  // The region, in the pyramid's frame.
  const bool region = q.around.has_value();
  Eigen::Vector2d centre = Eigen::Vector2d::Zero();
  if (region) centre = q.around->head<2>() - map_origin.head<2>() - p.origin.head<2>();
  math::SearchLimits limits;
  limits.standing_bits = standing_bits;
  limits.region = region;
  limits.cx = centre.x();
  limits.cy = centre.y();
  limits.radius = region ? q.radius : 0.0;
  limits.cell = cell;
  const auto admits = [&](const math::SearchNode& n) { return math::node_admitted(stand, limits, n); };
  st.prepare_ms = detail::ms_since(t0);

  // The branch and bound.
  const auto tb = std::chrono::steady_clock::now();
  const int top = p.level_count - 1;
  std::vector<math::SearchNode> batch;
  std::vector<std::uint32_t> bounds;
  {
    // The leaves a sweep of every admitted position at the leaf step would score.
    double leaves = 0.0;
    if (standing_bits) {
      for (unsigned v = 0; v < 256; ++v) {
        if (v & standing_bits) leaves += static_cast<double>(p.standing_histogram[v]);
      }
    } else {
      leaves = static_cast<double>(p.level_stride());
    }
    if (region) {
      const double area = static_cast<double>(p.nx) * p.ny * cell * cell;
      leaves *= std::min(1.0, kPi * q.radius * q.radius / area);
    }
    st.brute_force_leaves = static_cast<std::size_t>(leaves * rotations);
  }
  // The top level's nodes (every leaf, for the exhaustive baseline), in batches.
  const int first_level = o.exhaustive ? 0 : top;
  const int wfirst = 1 << first_level;
  const auto for_each_first = [&](const std::function<void(const math::SearchNode&)>& f) {
    for (int l = 0; l < p.nz; l += wfirst) {
      for (int j = 0; j < p.ny; j += wfirst) {
        for (int i = 0; i < p.nx; i += wfirst) {
          for (int k = 0; k < rotations; ++k) {
            math::SearchNode n;
            n.i = i;
            n.j = j;
            n.l = l;
            n.yaw = static_cast<std::uint16_t>(k);
            n.level = static_cast<std::uint16_t>(first_level);
            if (admits(n)) f(n);
          }
        }
      }
    }
  };

  struct Leaf {
    std::uint32_t score;
    math::SearchNode node;
  };
  std::vector<Leaf> kept;  // best first, distinct places
  const std::size_t keep = std::max(o.candidates, o.screen_leaves);
  const double same_yaw = kSameYawDeg / step_deg;
  const auto same_place = [&](const math::SearchNode& a, const math::SearchNode& b) {
    // Any tilts: the alignment brings a place's attitudes together.
    double dyaw = std::abs(static_cast<double>(a.yaw % yaws) - static_cast<double>(b.yaw % yaws));
    dyaw = std::min(dyaw, yaws - dyaw);
    return std::abs(a.i - b.i) <= kSameCells && std::abs(a.j - b.j) <= kSameCells && std::abs(a.l - b.l) <= kSameCells &&
           dyaw <= same_yaw;
  };
  const auto offer = [&](std::uint32_t score, const math::SearchNode& n) {
    for (const Leaf& k : kept) {
      if (same_place(k.node, n) && k.score >= score) return;  // a better leaf holds this place
    }
    kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const Leaf& k) { return same_place(k.node, n); }), kept.end());
    const auto at = std::find_if(kept.begin(), kept.end(), [&](const Leaf& k) { return k.score < score; });
    kept.insert(at, Leaf{score, n});
    if (kept.size() > keep) kept.pop_back();
  };
  std::uint32_t dived = 0;  // the best leaf the dives reached (below)
  const auto threshold = [&]() -> std::uint32_t {
    if (kept.empty() && dived == 0) return 1;  // a node whose points all miss the map is no place
    const std::uint32_t best = std::max(dived, kept.empty() ? 0u : kept.front().score);
    const auto ratio = static_cast<std::uint32_t>(std::ceil(o.prune_ratio * best));
    const std::uint32_t full = kept.size() >= keep ? kept.back().score : 0;
    return std::max<std::uint32_t>({1, ratio, full});
  };

  double scoring_ms = 0.0;  // of bound_ms, the scorer's (the rest: the host's work)
  // The top level's nodes scored (leaves offered, for the exhaustive baseline), kept in
  // the order of their bounds.
  std::vector<ScoredNode> tops;
  const auto score_batch = [&]() {
    const auto ts = std::chrono::steady_clock::now();
    scorer->score(batch, bounds);
    scoring_ms += detail::ms_since(ts);
    st.nodes_scored += batch.size();
    ++st.batches;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      if (batch[b].level == 0) {
        ++st.leaves_scored;
        if (bounds[b] >= threshold()) offer(bounds[b], batch[b]);
      } else if (bounds[b] >= 1) {
        tops.push_back(ScoredNode{batch[b], bounds[b]});
      }
    }
    batch.clear();
  };
  for_each_first([&](const math::SearchNode& n) {
    batch.push_back(n);
    ++st.top_nodes;
    if (batch.size() >= batch_nodes) score_batch();
  });
  if (!batch.empty()) score_batch();
  std::stable_sort(tops.begin(), tops.end(), [](const ScoredNode& a, const ScoredNode& b) { return a.bound < b.bound; });

  // Best first, in bands of bounds, where the scorer stands (PyramidScorer::step and
  // restock): the nodes waiting lie in the scorer's store; each band moves those of bound
  // at least its floor onto the scorer's stack, which steps expand depth first (the best
  // of each step's children first), children below the floor going back to the store. The
  // floors fall by kBand from the best top node's bound to the threshold, so every node
  // expanded bounds at least kBand times the best leaf's score (above the prune ratio's
  // share of it): the nodes a best-first search expands, with the leaves found in nearly
  // its order, and only the leaves and the counts crossing to the host. On a 1 km
  // simulated city a best-first queue on the host took 2.5 s of a 3.2 s search, the
  // scorer's share 0.7 s.
  std::size_t bands = 0, offered = 0;
  std::vector<ScoredNode> leaves;
  if (!tops.empty()) {
    const std::size_t dives = std::min(tops.size(), kDives);
    std::vector<math::SearchNode> divers;
    for (std::size_t k = tops.size() - dives; k < tops.size(); ++k) divers.push_back(tops[k].node);
    while (!divers.empty() && divers.front().level > 0) {
      const detail::PyramidScorer::Expansion grown = scorer->expand(divers, limits, 1, batch, bounds);
      st.nodes_scored += grown.scored;
      st.leaves_scored += grown.leaves;
      ++st.batches;
      std::vector<math::SearchNode> next;
      std::size_t b = 0;
      for (const math::SearchNode& d : divers) {
        const int w = 1 << d.level;
        std::uint32_t best = 0;
        math::SearchNode pick{};
        bool any = false;
        for (; b < batch.size() && batch[b].yaw == d.yaw && batch[b].i >= d.i && batch[b].i < d.i + w && batch[b].j >= d.j &&
               batch[b].j < d.j + w && batch[b].l >= d.l && batch[b].l < d.l + w;
             ++b) {
          if (!any || bounds[b] > best) {
            best = bounds[b];
            pick = batch[b];
            any = true;
          }
        }
        if (!any) continue;
        if (pick.level == 0) {
          dived = std::max(dived, best);
        } else {
          next.push_back(pick);
        }
      }
      batch.clear();
      divers.swap(next);
    }
  }
  if (!tops.empty()) {
    scorer->defer(tops);
    double floor = kBand * tops.back().bound;
    while (!st.truncated && scorer->deferred() > 0) {
      ++bands;
      const std::uint32_t band = std::max(threshold(), static_cast<std::uint32_t>(std::floor(floor)));
      scorer->restock(band, threshold());
      while (scorer->stacked() > 0) {
        if (st.nodes_scored >= o.max_nodes) {
          st.truncated = true;
          break;
        }
        const auto ts = std::chrono::steady_clock::now();
        const detail::PyramidScorer::Expansion grown =
            scorer->step(descent_parents, limits, threshold(), std::max(band, threshold()), leaves);
        scoring_ms += detail::ms_since(ts);
        st.nodes_scored += grown.scored;
        st.leaves_scored += grown.leaves;
        ++st.batches;
        for (const ScoredNode& leaf : leaves) {
          if (leaf.bound >= threshold()) {
            offer(leaf.bound, leaf.node);
            ++offered;
          }
        }
      }
      floor *= kBand;
    }
    scorer->clear_stack();
  }
  st.bound_ms = detail::ms_since(tb);
  detail::log().debug("global search: {} bands, {} leaves offered, {} kept", bands, offered, kept.size());
  if (kept.empty()) {
    result.best.source_points = scan.size();
    result.best.reason = StopReason::NoCorrespondence;
    result.time_ms = detail::ms_since(t0);
    return result;
  }
  st.best_leaf_score = static_cast<double>(kept.front().score) / (255.0 * static_cast<double>(n_pts));

  // The kept leaves as poses, ranked by the NDT score there when there are more than the
  // candidates, the best aligned by the NDT coarse-to-fine search.
  std::vector<Pose6> hypotheses;
  for (const Leaf& k : kept) {
    Eigen::Matrix4d t = Eigen::Matrix4d::Identity();
    t.topLeftCorner<3, 3>() = rotation(k.node.yaw) * level;
    t.topRightCorner<3, 1>() = map_origin + p.origin + Eigen::Vector3d(k.node.i, k.node.j, k.node.l) * cell;
    hypotheses.push_back(matrix_to_pose(t));
  }
  if (hypotheses.size() > o.candidates) {
    const auto ts = std::chrono::steady_clock::now();
    PointCloud thinned;
    const PointCloudView screened = detail::thinned(scan, o.screen_points, thinned);
    const std::vector<PoseScore> scores = aligner->score_batch(screened, hypotheses);
    const double n = static_cast<double>(screened.size());
    std::vector<double> rank(scores.size());
    for (std::size_t h = 0; h < scores.size(); ++h) {
      const PoseScore& r = scores[h];
      rank[h] = std::isnan(r.nvtl) || r.matched_points == 0 ? -1.0 : r.nvtl * static_cast<double>(r.matched_points) / n;
    }
    std::vector<std::size_t> order(hypotheses.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank[a] > rank[b]; });
    // The `candidates` best by the NDT score and the `candidates` best leaves (the kept list
    // is in leaf order), each once: a leaf half a cell and a yaw step from its place can
    // score below a wrong place's at 2 m voxels and still be the one that aligns best.
    std::vector<bool> taken(hypotheses.size(), false);
    for (std::size_t k = 0; k < o.candidates; ++k) taken[order[k]] = true;
    for (std::size_t k = 0; k < o.candidates; ++k) taken[k] = true;
    std::vector<Pose6> best;
    for (std::size_t k = 0; k < hypotheses.size(); ++k) {
      if (taken[k]) best.push_back(hypotheses[k]);
    }
    hypotheses.swap(best);
    st.screen_ms = detail::ms_since(ts);
  }
  InitialPoseOptions refine = o.refine;
  refine.refine_count = std::max<int>(refine.refine_count, static_cast<int>(hypotheses.size()));
  refine.screen_above = 0;
  const auto ta = std::chrono::steady_clock::now();
  InitialPoseResult aligned = search_hypotheses(*aligner, scan, hypotheses, refine);
  aligned.global = st;
  polish(scan, aligned);
  aligned.global.align_ms = detail::ms_since(ta);
  aligned.leveled = result.leveled;
  aligned.time_ms = detail::ms_since(t0);
  detail::log().debug("global search: {} points, {} yaws of {:.2f} deg, {} top nodes, {} scored ({} leaves, {} batches) "
                      "in {:.1f} ms ({:.1f} ms scoring), {} candidates aligned in {:.1f} ms; NVTL {:.4f}{}",
                      st.points, st.yaws, st.yaw_step_deg, st.top_nodes, st.nodes_scored, st.leaves_scored, st.batches,
                      st.bound_ms, scoring_ms, hypotheses.size(), aligned.global.align_ms, aligned.best.nvtl,
                      aligned.ambiguous ? ", ambiguous" : "");
  return aligned;
}

// The best pose aligned once more on the finer map (set_fine), from where the candidates'
// alignment left it, and taken when that settled close by.
void InitialPoseSearch::Impl::polish(PointCloudView scan, InitialPoseResult& r) const {
  if (!fine || !r.best.converged) return;
  const AlignResult f = detail::align_continued(*fine, scan, r.best.transform, 2);
  if (!f.converged || !f.transform.allFinite()) return;
  const double moved = (f.transform.topRightCorner<3, 1>() - r.best.transform.topRightCorner<3, 1>()).norm();
  const Eigen::Matrix3d turn = f.transform.topLeftCorner<3, 3>() * r.best.transform.topLeftCorner<3, 3>().transpose();
  const double angle = Eigen::AngleAxisd(turn).angle();
  r.refinement_m = moved;
  // Half of the points met a finer voxel, as verdict() asks of the found pose.
  if (moved > 0.5 * fine->settings().resolution || angle > 2.0 * kDeg || 2 * f.matched_points < f.source_points) return;
  r.best.transform = f.transform;
  r.best.pose = f.pose;
  if (!r.candidates.empty()) r.candidates.front().pose = f.pose;
  r.refined = true;
}

}  // namespace ndtcu
