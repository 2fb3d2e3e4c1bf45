#pragma once
// The World's internals: primitives in the form the ray caster wants (yaw as cos/sin,
// window lattices resolved per face), the BVH over them and the ground's min/max blocks.
#include <ndtcu/simulator.hpp>

#include <cstdint>
#include <vector>

namespace ndtcu::sim::detail {

/// A box (plain or facade) with its yaw resolved.
struct BoxShape {
  Eigen::Vector3d center;        ///< scene frame (m)
  Eigen::Vector3d half;          ///< half extents along the box axes (m)
  double cos_yaw = 1.0;          ///< cos of the box's yaw
  double sin_yaw = 0.0;          ///< sin of the box's yaw
  float reflectivity = 0.3f;     ///< wall reflectivity
  int windows = -1;              ///< index into WorldData::windows, -1 for a plain box
};

/// A facade's window lattice, resolved for each pair of opposite faces.
struct FacadeWindows {
  WindowGrid grid;  ///< as given
  /// Window slots on the faces normal to local axis a (a = 0: the +-x faces, whose
  /// horizontal in-face coordinate is local y; a = 1: the +-y faces, coordinate x).
  int cols[2] = {0, 0};
  double u_start[2] = {0.0, 0.0};  ///< in-face coordinate where slot 0 starts (m)
  int rows = 0;                    ///< window rows (floors with windows)
};

/// Where a window recess sits: its extent along the face's horizontal coordinate and in
/// local z (box frame).
struct WindowRect {
  double u_lo, u_hi, z_lo, z_hi;
};

/// Shape references packed in 32 bits: kind in the top two, index below.
enum ShapeKind : std::uint32_t { kBox = 0, kCylinder = 1, kSphere = 2 };
constexpr std::uint32_t kKindShift = 30;
constexpr std::uint32_t kIndexMask = (1u << kKindShift) - 1;
inline std::uint32_t make_ref(ShapeKind kind, std::uint32_t index) { return (static_cast<std::uint32_t>(kind) << kKindShift) | index; }

/// A BVH node. Interior nodes have count == 0: left child at this index + 1, right child at
/// `index`. Leaves hold refs[index, index + count).
struct BvhNode {
  double lo[3];
  double hi[3];
  std::uint32_t index = 0;
  std::uint16_t count = 0;
  std::uint8_t axis = 0;  ///< split axis, to visit the nearer child first
};

/// Min/max of ground heights over square blocks of cells, so rays skip whole blocks.
struct GroundBlocks {
  int block = 16;   ///< cells per block side: 16 x 0.5 m = 8 m, a few blocks per ray
  int nbx = 0;      ///< blocks along x
  int nby = 0;      ///< blocks along y
  std::vector<float> lo, hi;  ///< per block, x fastest
  double z_lo = 0.0, z_hi = 0.0;  ///< over the whole ground
};

/// Everything a World holds.
struct WorldData {
  Scene scene;
  std::vector<BoxShape> boxes;          ///< scene.boxes, then scene.facades
  std::vector<FacadeWindows> windows;   ///< one per facade
  std::vector<std::uint32_t> refs;      ///< shapes in BVH leaf order
  std::vector<BvhNode> nodes;           ///< BVH, depth-first
  GroundBlocks ground;
};

/// Builds the BVH over all shapes (binned SAH).
void build_bvh(WorldData& data);

/// Nearest primitive hit in (0, t_max]; updates `hit` and returns true when one is found.
bool cast_primitives(const WorldData& data, const Eigen::Vector3d& o, const Eigen::Vector3d& d, double t_max, Hit& hit);

/// Same answer as cast_primitives, by testing every primitive (for tests).
bool cast_primitives_brute_force(const WorldData& data, const Eigen::Vector3d& o, const Eigen::Vector3d& d,
                                 double t_max, Hit& hit);

/// True when p is inside a primitive by more than `tol`.
bool inside_primitives(const WorldData& data, const Eigen::Vector3d& p, double tol);

/// Prepares GroundBlocks for the scene's heightfield.
void build_ground_blocks(WorldData& data);

/// Nearest ground hit in (0, t_max].
bool cast_ground(const WorldData& data, const Eigen::Vector3d& o, const Eigen::Vector3d& d, double t_max, Hit& hit);

/// Resolves the window lattice of a facade.
FacadeWindows resolve_windows(const OrientedBox& box, const WindowGrid& grid);

/// The window recess on the face normal to local axis `a` at in-face coordinate u and
/// local z, grown by `tol`; false when (u, z) is plain wall.
bool window_at(const BoxShape& box, const FacadeWindows& w, int a, double u, double z, double tol, WindowRect* rect);

}  // namespace ndtcu::sim::detail
