#pragma once
/// \file
/// Global localization: where in the whole map is a scan, with no pose at all?
///
/// InitialPoseSearch builds, once per map, a pyramid of the map's NDT likelihood on a grid
/// of leaf cells (1 m) and its sliding-window maxima, and a pyramid of where a sensor can
/// stand (heights above a mapped floor). A search levels the scan (roll and pitch from its
/// ground plane, or from a gravity direction the caller gives), thins it, and runs a
/// branch and bound over the sensor's x, y, z and yaw (and roll and pitch about the leveled
/// attitude, with GlobalSearchOptions::tilt_deg): a node is an attitude and a block of 2^k
/// leaf translations, its bound the sum of the scan points' window maxima (it is at least
/// the score of every leaf below it). The search runs best first in bands of bounds where
/// the aligner's backend stands (the CUDA kernels, or the CPU's threads): the waiting nodes
/// are kept there, each band expands those above its floor depth first in batches (a GPU
/// launch each), and only the leaves found cross to the host; every node whose bound cannot
/// reach the candidates it keeps is pruned. The
/// best distinct leaves then go through find_initial_pose()'s coarse-to-fine NDT alignment
/// (search_hypotheses) on the same aligner, so the answer has NDT's accuracy, and its
/// ambiguity check: `found` only when no distinct place scores within the margin.
/// Its cost grows with the places that look like the scan, not with the map's area.

#include <ndtcu/aligner.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/point_cloud.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <memory>
#include <optional>

namespace ndtcu {

/// How InitialPoseSearch builds its pyramid and searches.
/// Cells of a map's extent at 1 m above which GlobalSearchOptions::cell = 0 chooses 2 m.
inline constexpr double kAutoCellLimit = 1e8;

struct GlobalSearchOptions {
  /// Leaf step of the positions and cell of the pyramid (m). 1 m leaves every position
  /// within 0.5 m (per axis) of a leaf, inside the basin of the NDT refinement at
  /// Autoware's 2 m resolution; half of it quadruples the leaves and the pyramid's memory.
  /// 0 chooses it from the map: 1 m, or 2 m where the map's extent at 1 m holds more than
  /// kAutoCellLimit cells (x-y-z, margins included). The leaves, and where bounds
  /// are loose the nodes, grow with the cells: on a 1 km simulated city (1.8e8 cells) 1 m
  /// leaves stopped 8 of 10 searches at max_nodes after 330 ms (H200), 2 m leaves found
  /// all 30 queries of three cities and sensors in a median of 74-98 ms; on a 500 m city
  /// (4.5e7 cells) 2 m leaves lost 3 of 50 places that 1 m found (their alignment from a
  /// leaf up to 1 m and a larger yaw step off did not converge), so it keeps 1 m.
  double cell = 0.0;
  /// Levels of the pyramid, 0 choosing as many as leave at most 8 x 8 windows over the
  /// map's x-y extent at the top (at most 9: windows of 256 cells).
  int levels = 0;
  /// Spacing of the yaws (deg); 0 chooses it from the scan: the angle that moves the
  /// thinned scan's 80th-percentile range by one cell, within [1, 6] deg.
  double yaw_step_deg = 0.0;
  /// Points of the scan the bounds sum (every k-th of the scan after a voxel filter of one
  /// cell, those within max_point_range). The bound's cost is proportional to them.
  std::size_t points = 384;
  /// Scan points farther than this (m) are not used by the bounds: a yaw error moves them
  /// most, and the yaw step is chosen for the points used.
  double max_point_range = 40.0;
  /// Of the points, at most this share lies on the scan's ground plane: ground fits
  /// anywhere at the right height and would drown the structure that tells places apart.
  double max_ground_share = 0.1;
  /// Distinct leaves (apart by more than 2 cells or 10 deg of yaw) kept as candidates and
  /// handed to the NDT alignment. The ambiguity check sees those that were kept.
  std::size_t candidates = 24;
  /// Distinct leaves the branch and bound keeps and the NDT score ranks (Aligner::
  /// score_batch at each leaf's pose, on screen_points of the scan, by NVTL times the share
  /// of points that met a voxel): the `candidates` best by it and the `candidates` best
  /// leaves are aligned (up to twice `candidates`): the leaf grid's 1 m likelihood ranks
  /// places coarsely, the NDT score at 2 m voxels finely, and either alone left the right
  /// place out of some searches (a 500 m simulated city, the Livox set).
  std::size_t screen_leaves = 256;
  /// Points of the scan (every k-th) the NDT score of the leaves uses.
  std::size_t screen_points = 256;
  /// Nodes whose bound is below this share of the best leaf's score are pruned: places
  /// whose points fit a fifth worse at the leaf grid are no rivals after alignment.
  double prune_ratio = 0.8;
  /// Nodes scored per batch of the top level (a GPU launch, or the CPU's share-out); a
  /// step of the search expands this many parents on CUDA (8 times as many children), an
  /// eighth of it (at most 256) on the CPU. 131,072, not 32,768: fewer, fuller steps on
  /// an H200 took the 1 km simulated city from 106 to 96 ms and the 500 m city from 107 to
  /// 98 ms (median), BALM from 5.0 to 4.3 ms and the Livox set from 9.3 to 9.2 ms, with
  /// the same verdicts (BENCHMARK.md).
  std::size_t batch_nodes = 131072;
  /// A search scores at most this many nodes; beyond it the search stops with the
  /// candidates it has (InitialPoseResult::global.truncated says so).
  std::size_t max_nodes = 200'000'000;
  /// The sensor stands above a mapped floor: positions are searched only where the scan's
  /// height above its near ground plane (the points within 20 m; +- standing_tolerance) is
  /// a height above the top of a surface of the map beside it. Off, or when the scan shows
  /// no near ground level with its up direction, every height in the map's vertical extent
  /// is searched. Off by default, for the memory: a second pyramid as large as the first
  /// (3.3 GB instead of 1.6 GB on a 1 km simulated city). On an H200 it took the 500 m city
  /// from 109 to 85 ms and the 1 km city from 389 to 311 ms (median) with the same
  /// verdicts, and the Livox set's verdicts were the same (BENCHMARK.md).
  bool standing = false;
  /// The baseline the branch and bound is measured against: every admitted leaf (position
  /// and yaw) scored, no bound used; the same candidates and alignment follow.
  bool exhaustive = false;
  /// 6-DoF: roll and pitch searched as well, on a grid of tilt_step_deg within a disc of
  /// this many degrees about the leveled attitude (the ground plane's or the query's up);
  /// 0: 4-DoF (x, y, z and yaw). For a scan whose up is known only roughly (no ground in
  /// view, an IMU's gravity off by a few degrees): the cost grows with the tilts (21 for 4
  /// deg at 2 deg: BALM's median 4.1 -> 33 ms on an H200), and where the leveling is right
  /// the tilts cost places (BALM 30 -> 28 found; Livox 108 -> 109). The candidates' NDT
  /// alignment is 6-DoF either way.
  double tilt_deg = 0.0;
  /// Spacing of the tilts (deg).
  double tilt_step_deg = 2.0;
  /// Tolerance (m) of the standing height.
  double standing_tolerance = 1.0;
  /// Cells of one pyramid level at most (the pyramid holds 2 bytes per cell and level):
  /// a map too large for it is refused with a message naming the extent.
  std::size_t max_cells = 400'000'000;
  /// The NDT alignment of the candidates and its ambiguity check (radius and the grid's
  /// options are not used; refine_count is raised to `candidates`).
  InitialPoseOptions refine;
};

/// Checks `options`; throws Error naming the field and the value.
void validate(const GlobalSearchOptions& options);

/// What a search may assume, beyond the scan.
struct GlobalSearchQuery {
  /// The scan's up direction in its own frame (gravity reversed, from an IMU); absent: the
  /// normal of the scan's ground plane, or the scan's z axis when it shows no ground.
  std::optional<Eigen::Vector3d> up;
  /// Search only within `radius` metres (x-y) of this pose's position (the prior of a
  /// kidnap recovery, a GNSS fix); absent: the whole map. Any radius: no hypothesis cap.
  std::optional<Pose6> around;
  double radius = 0.0;
};

/// Finds scans in the whole map of one aligner. Builds its pyramid from the aligner's
/// target when made (the map must not change while it is used: a new target needs a new
/// search); keeps a reference to the aligner, which must outlive it. A CUDA aligner's
/// search scores its nodes on the aligner's device and stream.
class InitialPoseSearch {
 public:
  /// Throws Error when the aligner has no host map (none set, or a tiled map held only on
  /// the device), for invalid options, or for a map too large for options.max_cells.
  explicit InitialPoseSearch(Aligner& aligner, const GlobalSearchOptions& options = {});
  ~InitialPoseSearch();
  InitialPoseSearch(InitialPoseSearch&&) noexcept;
  InitialPoseSearch& operator=(InitialPoseSearch&&) noexcept;

  /// The scan's pose anywhere in the map (or within query.radius of query.around):
  /// InitialPoseResult with the candidates ranked, verdict() as for find_initial_pose().
  /// Throws Error for a non-finite query; an empty scan or one with no structure is a
  /// result (verdict no_overlap).
  InitialPoseResult find(PointCloudView scan, const GlobalSearchQuery& query = {});

  /// The found pose polished against a finer map: after the candidates' alignment, the
  /// best (when it converged) is aligned once more by `fine` (an aligner of the same map at
  /// a finer resolution, e.g. half; up to two continuations while it runs out of
  /// iterations), and its pose taken when that converged, half of the scan's points met a
  /// finer voxel, and it moved the pose by at most half a finer voxel and 2 deg. The verdict, NVTL and
  /// covariance stay the candidates' alignment's (the threshold is the map resolution's);
  /// InitialPoseResult::refined says whether the pose is the finer one. On the Livox Avia
  /// set, whose scans keep 370-670 points, 2 m voxels held 4 of 114 found poses 10.7-11.8
  /// cm off; 1 m voxels bring them within 10 cm. Null: off. `fine` must outlive the search.
  void set_fine(Aligner* fine);
  /// The cell of the pyramid (m): options().cell, or the one it chose.
  double cell() const noexcept;
  /// The options in use.
  const GlobalSearchOptions& options() const noexcept;
  /// Time (ms) the pyramid took to build, and its host memory (bytes).
  double build_ms() const noexcept;
  std::size_t memory_bytes() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The verdict in three words: "found", "ambiguous", or "not_found" (every other verdict).
const char* found_state(InitialPoseVerdict verdict);

}  // namespace ndtcu
