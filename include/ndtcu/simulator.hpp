#pragma once
/// \file
/// Synthetic LiDAR worlds made by ndtcu itself: a procedural outdoor scene, a ray-cast
/// spinning LiDAR, a drivable trajectory with exact ground-truth poses, and a map sampled
/// from the same surfaces the scans hit. Everything is deterministic from a seed: the same
/// settings give the same bytes, whatever the thread count.
///
/// Frames. Primitives live in the *scene frame* (metres, double, centred near 0). The
/// *world frame* is `origin + Rz(yaw) * p_scene`: the large offset (e.g. UTM) stays in
/// double and the yaw turns the street grid away from the axes, so maps are not aligned
/// with voxel lattices. Scans are in the *sensor frame* (x forward, y left, z up).

#include <ndtcu/error.hpp>
#include <ndtcu/imu.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/point_cloud.hpp>

#include <Eigen/Geometry>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu {
struct TiledMapWriterOptions;  // ndtcu/tiled_map.hpp
struct TiledMapWriteStats;
}  // namespace ndtcu

namespace ndtcu::sim {

// ---------------------------------------------------------------------------------------
// Scene description
// ---------------------------------------------------------------------------------------

/// A solid box turned about the vertical axis (vehicles, walls, sign plates, buildings).
struct OrientedBox {
  Eigen::Vector3d center = Eigen::Vector3d::Zero();             ///< centre, scene frame (m)
  Eigen::Vector3d half_extents = Eigen::Vector3d::Constant(0.5);  ///< half sizes along the box's own axes (m)
  double yaw = 0.0;          ///< angle (rad) from the scene's x axis to the box's x axis, about z
  float reflectivity = 0.3f;  ///< diffuse reflectivity in [0, 1]
};

/// A lattice of rectangular window recesses cut into the four vertical faces of a
/// FacadeBox. Windows are centred on each face in slots `pitch` wide; rows repeat every
/// `floor_height` from `base_z` up to `top_margin` below the roof.
struct WindowGrid {
  double pitch = 3.0;         ///< horizontal slot width along a face (m); one window per slot
  double width = 1.4;         ///< window width (m), less than `pitch`
  double floor_height = 3.2;  ///< vertical spacing of window rows (m)
  double height = 1.6;        ///< window height (m)
  double sill = 0.9;          ///< window bottom above its floor level (m)
  double depth = 0.25;        ///< recess depth into the wall (m)
  double margin = 1.0;        ///< plain wall kept at each face's vertical edges (m), at least `depth`
  double base_z = 0.0;        ///< scene z of the ground-floor level (m)
  double top_margin = 0.8;    ///< plain wall kept below the roof (m)
  float glass_reflectivity = 0.08f;  ///< reflectivity of a recess's back wall (the glass)
};

/// A building block: an oriented box whose vertical faces carry window recesses.
struct FacadeBox {
  OrientedBox box;     ///< the solid
  WindowGrid windows;  ///< the recesses cut into its vertical faces
};

/// A solid vertical cylinder (poles, tree trunks), capped at both ends.
struct Cylinder {
  Eigen::Vector2d center = Eigen::Vector2d::Zero();  ///< axis position, scene x y (m)
  double z_min = 0.0;         ///< bottom cap height (m)
  double z_max = 1.0;         ///< top cap height (m)
  double radius = 0.1;        ///< radius (m)
  float reflectivity = 0.5f;  ///< diffuse reflectivity in [0, 1]
};

/// A solid sphere (tree crowns are clusters of them).
struct Sphere {
  Eigen::Vector3d center = Eigen::Vector3d::Zero();  ///< centre, scene frame (m)
  double radius = 1.0;        ///< radius (m)
  float reflectivity = 0.5f;  ///< diffuse reflectivity in [0, 1]
};

/// Ground as a regular grid of heights; each cell is split into two triangles along its
/// (0,0)-(1,1) diagonal, so the surface is exact and the same for rays and for sampling.
struct Heightfield {
  Eigen::Vector2d min_corner = Eigen::Vector2d::Zero();  ///< scene x y of vertex (0, 0) (m)
  double cell = 0.5;  ///< cell size (m)
  int nx = 0;         ///< cells along x
  int ny = 0;         ///< cells along y
  /// Vertex heights, (nx + 1) * (ny + 1) of them, x fastest (m).
  std::vector<float> heights;
  /// Per-cell reflectivity, nx * ny of them, x fastest; empty means 0.3 everywhere.
  std::vector<float> reflectivity;

  /// True when there is no ground.
  bool empty() const noexcept { return nx == 0 || ny == 0; }
  /// Surface height at scene (x, y); NaN outside the grid.
  double height_at(double x, double y) const;
  /// Reflectivity of the cell holding (x, y); 0 outside the grid.
  float reflectivity_at(double x, double y) const;
};

/// The street grid the generator laid out, which trajectories drive on.
struct RoadNetwork {
  std::vector<Eigen::Vector2d> nodes;          ///< intersections, scene x y (m)
  std::vector<std::pair<int, int>> edges;      ///< straight road segments between nodes
  double half_width = 5.0;                     ///< carriageway half width (m)
  double lane_offset = 1.5;                    ///< distance of the driving line right of the centre (m)
};

/// What the procedural generator placed (all zero for a hand-built scene).
struct SceneContents {
  std::size_t buildings = 0;  ///< buildings (one or two facade boxes each)
  std::size_t trees = 0;      ///< trees (trunk and a cluster of crown spheres)
  std::size_t poles = 0;      ///< street lights and sign posts
  std::size_t vehicles = 0;   ///< parked cars, vans and trucks
  std::size_t walls = 0;      ///< free-standing and boundary walls
};

/// Everything a World is made of. Fill it by hand (tests, custom scenes) or with
/// generate_scene().
struct Scene {
  Heightfield ground;                  ///< the terrain (may be empty)
  std::vector<OrientedBox> boxes;      ///< plain solids
  std::vector<FacadeBox> facades;      ///< solids with window recesses
  std::vector<Cylinder> cylinders;     ///< vertical cylinders
  std::vector<Sphere> spheres;         ///< spheres
  RoadNetwork roads;                   ///< drivable streets (empty: no trajectory can be made)
  SceneContents contents;              ///< generator statistics
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();  ///< world position of the scene frame's origin (m)
  double yaw = 0.0;                    ///< rotation of the scene frame about world z (rad)
  double size = 0.0;                   ///< side of the square the generator filled (m); 0 if hand-built

  /// Number of primitives (boxes, facades, cylinders, spheres), ground not counted.
  std::size_t primitive_count() const noexcept {
    return boxes.size() + facades.size() + cylinders.size() + spheres.size();
  }
};

/// T_world_scene: world pose of the scene frame (rotation yaw about z, translation origin).
Eigen::Isometry3d world_from_scene(const Scene& scene);

// ---------------------------------------------------------------------------------------
// World: a scene with its acceleration structure, ready for ray casting
// ---------------------------------------------------------------------------------------

/// The first surface a ray meets.
struct Hit {
  double range = 0.0;                               ///< distance along the unit ray (m)
  Eigen::Vector3d normal = Eigen::Vector3d::UnitZ();  ///< unit surface normal, scene frame
  float reflectivity = 0.0f;                        ///< reflectivity of the surface hit
};

namespace detail {
/// The acceleration structures behind a World (src/sim/world_data.hpp).
struct WorldData;
}  // namespace detail

/// An immutable scene plus a bounding-volume hierarchy over its primitives and a
/// min/max hierarchy over its ground. Thread-safe for concurrent queries.
class World {
 public:
  /// Validates the scene and builds the acceleration structures. Throws Error for an
  /// empty scene (no ground and no primitive) or a primitive with a non-finite or
  /// non-positive size, naming the primitive and field.
  explicit World(Scene scene);
  /// Moves a world.
  World(World&&) noexcept;
  /// Moves a world.
  World& operator=(World&&) noexcept;
  /// Frees the acceleration structures.
  ~World();

  /// The scene this world was built from.
  const Scene& scene() const noexcept;
  /// First surface hit by the ray `origin + t * direction` (scene frame, `direction` of
  /// unit length) for 0 < t <= max_range; nullopt when nothing is hit. A ray that starts
  /// inside a solid does not see that solid.
  std::optional<Hit> cast(const Eigen::Vector3d& origin, const Eigen::Vector3d& direction, double max_range) const;
  /// True when `p` (scene frame) lies inside a solid primitive by more than `tolerance`
  /// metres (window recesses are empty space) or below the ground by more than it.
  bool inside_solid(const Eigen::Vector3d& p, double tolerance) const;
  /// Ground height at scene (x, y); NaN where there is no ground.
  double ground_height(double x, double y) const;
  /// Internal data, for ndtcu's own sampling code and tests.
  const detail::WorldData& data() const noexcept { return *data_; }

 private:
  std::unique_ptr<detail::WorldData> data_;
};

// ---------------------------------------------------------------------------------------
// Procedural scene
// ---------------------------------------------------------------------------------------

/// Options of the procedural outdoor scene.
struct WorldSettings {
  std::uint64_t seed = 1;  ///< every random choice derives from it
  /// Side of the square world (m), 50 (one block and its streets) to 10000.
  double size = 200.0;
  /// World position of the scene's centre, e.g. {680000, 3900000, 40} for a UTM map.
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();
  /// Amplitude of the rolling terrain (m): the largest octave's height; 0 is flat but for
  /// bumps and curbs.
  double relief = 3.0;
  /// Ground grid cell (m); 0 chooses max(0.5, size / 4096) so the grid stays under 17M vertices.
  double ground_cell = 0.0;
};

/// Checks WorldSettings; throws Error naming the option (--world-size, --origin) and value.
void validate(const WorldSettings& settings);

/// Builds the procedural scene: a rotated street grid on rolling terrain with cambered
/// carriageways and 0.15 m curbs, buildings with window recesses and setbacks, street
/// lights, sign posts, street and park trees (noisy sphere clusters), parked vehicles,
/// parking lots and walls. Throws Error for invalid settings.
Scene generate_scene(const WorldSettings& settings);

/// Parses "x,y,z" (metres, three finite numbers) as given to --origin; throws Error
/// naming --origin and the text otherwise.
Eigen::Vector3d parse_origin(const std::string& text);

// ---------------------------------------------------------------------------------------
// LiDAR
// ---------------------------------------------------------------------------------------

/// How a LiDAR lays out the rays of one scan.
enum class ScanPattern {
  /// A spinning multi-beam sensor: one laser per ring, fired at `columns` evenly spaced
  /// azimuths per revolution; every revolution the same rays.
  Spinning,
  /// A solid-state sensor's rosette (a Livox's pair of Risley prisms): `columns` rays per
  /// scan along two superposed circular motions of incommensurate rates, inside a cone of
  /// fov_deg about the sensor's x axis. The curve goes on from one scan to the next, so no
  /// two scans share their rays (non-repetitive): a single scan leaves gaps that later ones
  /// fill. The ring list holds one entry, unused.
  Rosette,
};

/// A LiDAR: its ray pattern, ranges and noise. All rays start at the sensor origin.
struct LidarModel {
  std::string name = "custom";               ///< preset name or "custom"
  ScanPattern pattern = ScanPattern::Spinning;
  std::vector<double> ring_elevations_deg;   ///< elevation of each ring (deg), ring index = position
  int columns = 1800;                        ///< azimuth steps per revolution (Rosette: rays per scan)
  double fov_deg = 70.4;                     ///< Rosette: full angle of the cone of view (deg)
  double min_range = 0.5;                    ///< returns closer than this are discarded (m)
  double max_range = 100.0;                  ///< nothing beyond this is seen (m)
  double range_noise_sigma = 0.02;           ///< Gaussian range noise, one sigma (m)
  double dropout = 0.0;                      ///< probability that a return is lost, in [0, 1)

  /// Rays per scan (Spinning: rings * columns; Rosette: columns).
  std::size_t rays() const noexcept {
    return (pattern == ScanPattern::Rosette ? std::size_t{1} : ring_elevations_deg.size()) *
           static_cast<std::size_t>(columns);
  }
};

/// Names accepted by lidar_preset().
const std::vector<std::string>& lidar_preset_names();

/// A preset: "hdl32" (HDL-32E: 32 rings, -30.67 to +10.67 deg, 2250 columns, 1-100 m,
/// 2 cm noise), "hdl64" (HDL-64E: 64 rings, +2 to -24.9 deg in two blocks, 2000 columns,
/// 1-120 m, 2 cm), "os1-64" (64 rings, +/-22.5 deg uniform, 1024 columns, 0.5-120 m,
/// 1 cm), "os0-64" (64 rings, +/-45 deg uniform, 1024 columns, 0.3-50 m, 1 cm), "vlp16"
/// (VLP-16: 16 rings, +/-15 deg uniform, 1800 columns, 0.5-100 m, 3 cm), "avia" (Livox
/// Avia: a non-repetitive rosette in a 70.4 deg cone about x, 24,000 rays per 10 Hz scan,
/// 1-190 m, 2 cm); no dropout. Throws Error for another name, listing these.
LidarModel lidar_preset(const std::string& name);

/// Checks a model; throws Error naming the field (and its CLI option) and value.
void validate(const LidarModel& model);

/// Unit direction of ring `ring` at column `column` of scan `frame`, sensor frame.
/// Spinning: azimuth 2 pi column / columns, counter-clockwise from x (the frame does not
/// matter). Rosette: ray `column` of scan `frame`, the ring ignored.
Eigen::Vector3d ray_direction(const LidarModel& model, int ring, int column, std::uint64_t frame = 0);

/// One simulated revolution.
struct Scan {
  /// Sensor frame, with intensity (0 to 255); a sweep (cast_sweep()) also with each point's
  /// time from the sweep's start (PointCloud::time), each point in the sensor frame of its
  /// own time, as a sensor writes them.
  PointCloud cloud;
  std::vector<std::uint16_t> ring;   ///< ring of each point
  std::vector<std::uint32_t> column; ///< column of each point
  std::size_t rays = 0;              ///< rays cast (returns plus misses, dropouts, too-near hits)
};

/// Casts every ray of `model` from `scene_from_sensor` (T_scene_sensor). Points come in
/// column-major order (all rings of column 0, then column 1, ...). Range noise and
/// dropout are drawn per ray from a counter-based hash of (seed, frame, ray index), so
/// the result does not depend on `threads` (0: one per hardware thread). Intensity is
/// 255 * reflectivity * |cos(incidence)|. The scan is instantaneous (no motion skew).
Scan cast_scan(const World& world, const LidarModel& model, const Eigen::Isometry3d& scene_from_sensor,
               std::uint64_t seed, std::uint64_t frame, unsigned threads = 0);

/// The longest sweep (s) the simulator makes: a 2 Hz sensor.
inline constexpr double kMaxSweepTime = 0.5;

/// The time (s from the sweep's start) at which a sensor fires column `column` of a sweep
/// of `sweep_time` seconds: by azimuth for a spinning sensor (column c of C at
/// sweep_time * c / C), in emission order for the rosette (its ray c, the same formula).
/// Exactly the time cast_sweep() gives the column's points.
double column_time(const LidarModel& model, int column, double sweep_time);

/// As cast_scan(), with the sensor moving during the sweep: column c (spinning: every ring
/// at one azimuth; rosette: ray c) is cast from `column_poses[c]` (T_scene_sensor at
/// column_time(model, c, sweep_time); `model.columns` poses) and its points are in the
/// sensor frame of that pose, their time column_time(model, c, sweep_time). The same
/// noise and dropout as cast_scan(): with every pose the same, the same points. Throws
/// Error when the pose count is not the column count or the sweep time is outside
/// [0, kMaxSweepTime].
Scan cast_sweep(const World& world, const LidarModel& model, const std::vector<Eigen::Isometry3d>& column_poses,
                double sweep_time, std::uint64_t seed, std::uint64_t frame, unsigned threads = 0);

// ---------------------------------------------------------------------------------------
// Trajectory
// ---------------------------------------------------------------------------------------

/// Options of the drive through the street grid.
struct TrajectorySettings {
  std::uint64_t seed = 1;       ///< route and speed choices derive from it
  int frames = 50;              ///< poses to produce, at least 1 (--frames)
  double rate_hz = 10.0;        ///< sampling rate (Hz)
  double sensor_height = 1.8;   ///< sensor above the ground contact point, along the body's z (m)
  double min_speed = 6.0;       ///< slowest cruise speed of a street segment (m/s)
  double max_speed = 13.0;      ///< fastest cruise speed of a street segment (m/s)
  double turn_radius = 7.0;     ///< radius of the road centre line through turns (m)
  double lateral_accel = 2.0;   ///< cornering limit (m/s^2): a comfortable drive
  double accel = 1.2;           ///< acceleration limit (m/s^2): gentle
  double brake = 2.0;           ///< braking limit (m/s^2): comfortable
  /// At an intersection, turn whenever a street other than straight ahead (within 30 deg)
  /// goes on; otherwise straight ahead is twice as likely as each turn.
  bool always_turn = false;
  /// The drive starts from a standstill (a vehicle pulling away) instead of at its cruise speed.
  bool start_at_rest = false;
  /// Stops: the vehicle brakes to a standstill this far from the start (m; 0: no stop) ...
  double first_stop = 0.0;
  /// ... and again every this many metres after it (0: only the first) ...
  double stop_interval = 0.0;
  /// ... and stands still this long each time (s).
  double stop_seconds = 0.0;
  /// From this frame on the sensor is elsewhere (-1: never; else 1 to frames - 1): the
  /// drive goes on from a point of another street's lane (or of the other direction's; for a
  /// jump that reaches neither, of a parallel street's lane in the drive's own direction)
  /// exactly kidnap_distance from the ground point of the frame before, horizontally.
  int kidnap_frame = -1;
  /// The kidnap's jump (m, --kidnap-distance), in (0, 1000]: any distance at which a street
  /// lies, up to the world's diagonal (simulate() refuses more).
  double kidnap_distance = 20.0;
};

/// Checks TrajectorySettings; throws Error naming the option (--frames) and value.
void validate(const TrajectorySettings& settings);

/// One pose of the drive.
struct TrajectorySample {
  double time = 0.0;                                               ///< seconds from the first pose
  Eigen::Isometry3d scene_from_sensor = Eigen::Isometry3d::Identity();  ///< T_scene_sensor
  double speed = 0.0;                                              ///< m/s
  double distance = 0.0;                                           ///< metres driven from the first pose
};

/// A random drive along the right-hand lane of the road network, turning at
/// intersections (no U-turns) on circular arcs, with a speed profile limited in
/// acceleration, braking and lateral acceleration, standing still at the stops of the
/// settings, and jumping elsewhere at their kidnap frame. The body follows the ground: z
/// from the four wheel contacts, pitch from front/rear and roll from left/right heights.
/// Poses are at times frame / rate_hz. Throws Error when the scene has no road network,
/// or when no street lies at the kidnap distance.
std::vector<TrajectorySample> generate_trajectory(const World& world, const TrajectorySettings& settings);

/// The drive of generate_trajectory(), continuous in time: its pose at each frame and at
/// any moment of the sweep that starts there (what a moving sensor sees during a scan).
class Drive {
 public:
  /// Lays out the drive (as generate_trajectory() does; the same errors). `world` must
  /// outlive the Drive.
  Drive(const World& world, const TrajectorySettings& settings);
  /// Moves a drive.
  Drive(Drive&&) noexcept;
  /// Moves a drive.
  Drive& operator=(Drive&&) noexcept;
  /// Frees the drive.
  ~Drive();
  /// The pose `offset` seconds after frame `frame`'s time (frame / rate_hz); at offset 0
  /// exactly generate_trajectory()'s sample `frame`. Throws Error for a frame outside
  /// [0, frames) or an offset outside [0, kMaxSweepTime] (before the last frame, outside
  /// [0, max(kMaxSweepTime, 1 / rate_hz)]: up to the next frame's time). After a kidnap frame's time the
  /// frame before it goes on along its own street (the jump happens between sweeps).
  TrajectorySample at(int frame, double offset = 0.0) const;
  /// Frames of the drive (TrajectorySettings::frames).
  int frames() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------
// Degenerate and repeated places
// ---------------------------------------------------------------------------------------

/// Places where a scan cannot pin every direction of its pose, or pins it equally well at
/// several poses, for testing what a localizer does there (their weak directions and their
/// copies are known exactly). In the scene frame the place's axis is x and its middle is 0.
enum class Place {
  Corridor,    ///< a tunnel 4 m wide and 3 m high, flat walls, floor and ceiling: nothing along its axis
  WalledRoad,  ///< a straight road between two flat 4 m walls 14 m apart, open above: nothing along it
  OpenLot,     ///< an empty flat lot 120 m wide: only height, roll and pitch are held
  /// A straight flat street along the axis lined on both sides by identical plots, one every
  /// kHouseRowPitch metres: each plot a house (a FacadeBox 10 m along the street, 8 m deep,
  /// 6 m high, windows on every face; its front kHouseRowSetback from the centre line), a
  /// street light in front of it and a tree beside it. Every pose is pinned locally (house
  /// corners, poles, trunks), but the same pose moved a whole number of pitches along the
  /// street sees the same scene: a global search must call it ambiguous.
  HouseRow,
  /// An indoor floor: kCorridorCount identical corridors 3 m wide and 2.8 m high along the
  /// axis, kCorridorSpacing apart (centre to centre), joined at both ends by a cross corridor.
  /// Each corridor has a door recess in its left (+y) wall and a pillar on its right (-y)
  /// wall every kCorridorPitch metres, the same in every corridor: a pose is repeated a whole
  /// number of pitches along its corridor and at the same place of every other corridor.
  ParallelCorridors,
};

/// HouseRow: distance between identical plots along the street (m). 20 m is a terraced
/// street's plot (a 10 m house and a 10 m gap), short enough that a 100 m scan holds ten
/// copies, long enough that a search's coarse grid (a few metres) tells the copies apart.
inline constexpr double kHouseRowPitch = 20.0;
/// HouseRow: distance from the street's centre line to the houses' fronts (m): 6.5 m of
/// road and pavement (the street lights stand at its edge) and a 1.5 m front garden; the
/// houses reach 16 m, the ground 30 m.
inline constexpr double kHouseRowSetback = 8.0;
/// ParallelCorridors: distance between identical bays along each corridor (m): a 6 m
/// structural grid, one office door and one pillar per bay.
inline constexpr double kCorridorPitch = 6.0;
/// ParallelCorridors: distance between neighbouring corridors, centre to centre (m): a 3 m
/// corridor and 5 m of rooms and walls between two.
inline constexpr double kCorridorSpacing = 8.0;
/// ParallelCorridors: how many corridors (at scene y = (k - 1.5) * kCorridorSpacing, k = 0..3).
inline constexpr int kCorridorCount = 4;

/// "corridor", "walled-road", "open-lot", "house-row", "parallel-corridors" (in Place's order).
const std::vector<std::string>& place_names();
/// The name of a place.
const char* to_string(Place place);
/// The place of a name of place_names(); throws Error naming it and listing them.
Place place_from_string(const std::string& name);

/// Options of a degenerate place.
struct PlaceSettings {
  Place place = Place::Corridor;  ///< which place
  double length = 300.0;          ///< length along its axis (m), 50 to 2000
  /// World position of the scene frame's origin (the middle of the place).
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();
  /// Rotation of the scene frame about world z (rad): the place's axis is (cos, sin, 0), off
  /// the voxel lattice's axes by default.
  double yaw = 0.5;
};

/// Checks PlaceSettings; throws Error naming the field and value.
void validate(const PlaceSettings& settings);
/// The scene of a place: its ground, walls and ceiling as the place says, running 10 m
/// past both ends of its drive (ParallelCorridors: the corridors end at +-length / 2 in the
/// cross corridors). HouseRow's plots are centred at scene x = k * kHouseRowPitch for every
/// integer k whose whole plot (+-pitch / 2) lies within +-length / 2; ParallelCorridors' bays
/// (door and pillar) at x = k * kCorridorPitch for every k whose bay lies within
/// +-length / 2. No road network (place_drive() gives the trajectory).
Scene generate_place(const PlaceSettings& settings);
/// The unit axis of a place's scene in the world frame (the scene frame's x turned by its yaw).
Eigen::Vector3d place_axis(const Scene& scene);
/// `frames` poses at `rate_hz` along the place's axis (sensor level, x forward), at a speed
/// that swings between 2 and 8 m/s every 6 s, so a constant-velocity prediction misses
/// along the axis. The drive runs from scene x = -0.4 length, at scene y = -1.5 (the
/// right-hand lane) on WalledRoad and HouseRow, in corridor 1 (scene y = -4) of
/// ParallelCorridors, on the centre line elsewhere; at 1.5 m in the corridors, 1.8 m
/// outdoors. Throws Error when the drive would leave the place.
std::vector<TrajectorySample> place_drive(const PlaceSettings& settings, int frames, double rate_hz);
/// Where a sensor sees what it sees at `world_position` (world frame; in a corridor for
/// ParallelCorridors), in a place that repeats: that position moved by whole pitches along
/// the axis and, in ParallelCorridors, to the same place of every corridor (scene y changed
/// by whole kCorridorSpacing from the nearest corridor's), each kept while a sensor there with
/// `clearance` metres of range (its max range) sees neither end of the repeated part: its
/// scene x within +-(that part's half length - clearance). The half length is (k + 1/2)
/// pitches for the k of generate_place(): 150 m for a 300 m HouseRow, 147 m for a 300 m
/// ParallelCorridors. World frame, the given height kept, ordered by corridor, then along
/// the axis; `world_position` is among them. A position that is not itself clear of the ends,
/// or a place that does not repeat (its sameness along the axis is continuous), gives
/// `world_position` alone. Throws Error for a negative or non-finite clearance.
std::vector<Eigen::Vector3d> place_repeats(const PlaceSettings& settings, const Eigen::Vector3d& world_position,
                                           double clearance);

// ---------------------------------------------------------------------------------------
// Map
// ---------------------------------------------------------------------------------------

/// Options of the map sampled from the scene's surfaces.
struct MapSettings {
  std::uint64_t seed = 1;  ///< sample positions derive from it
  /// Voxel-grid leaf applied to the samples (m, --map-voxel); 0 keeps every sample.
  double voxel = 0.2;
  /// Samples per square metre of surface; 0 chooses 6 / voxel^2 (about six samples per
  /// voxel face), or 100 without a voxel filter.
  double density = 0.0;
  /// When non-zero, the map has exactly this many points (--map-points): the density is
  /// chosen from the surface area and the voxel filter is not applied.
  std::size_t target_points = 0;
  unsigned threads = 0;  ///< worker threads, at most kMaxThreads; 0: one per hardware thread
};

/// Checks MapSettings; throws Error naming the option and value.
void validate(const MapSettings& settings);

/// Samples every surface of the world uniformly (ground triangles, box and facade faces,
/// window recesses, cylinders, spheres), drops samples hidden inside another solid or
/// under the ground, and voxel-filters them. The cloud is in the world frame: its
/// `origin` is the scene's origin and its points are Rz(yaw) * p_scene, in float.
PointCloud sample_map(const World& world, const MapSettings& settings);

/// The map of sample_map() written as a tiled map (ndtcu/tiled_map.hpp) in `dir`, tiles of
/// `tile_size` metres, without ever holding it whole: the samples are drawn about
/// options.buffer_points at a time (4M by default) and handed to a TiledMapWriter, so a
/// map of 10^8 points and more is written in a few hundred MB. Without a voxel filter the
/// tiles hold exactly the points sample_map() gives at the same density, in the same
/// order. Differences: `voxel` filters each tile on its own (options.voxel is replaced by
/// it; cells along tile borders differ), and `target_points` sets the density for about
/// that many points (the expected count; no exact thinning, which needs the whole map).
TiledMapWriteStats write_tiled_map(const World& world, const MapSettings& settings, double tile_size,
                                   const std::string& dir, const TiledMapWriterOptions& options);

// ---------------------------------------------------------------------------------------
// Poses on disk
// ---------------------------------------------------------------------------------------

/// A time-stamped pose (T_world_sensor in the files simulate() writes).
struct TimedPose {
  double time = 0.0;                                       ///< seconds
  Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();  ///< the pose
};

/// Writes TUM lines `t x y z qx qy qz qw` (translation to 1e-6 m, quaternion to 1e-9,
/// qw >= 0). Throws IoError.
void write_tum_poses(const std::string& path, const std::vector<TimedPose>& poses);

/// Writes KITTI lines: the top 3x4 of each pose, row-major (rotation to 1e-9,
/// translation to 1e-6 m). Throws IoError.
void write_kitti_poses(const std::string& path, const std::vector<TimedPose>& poses);

/// Reads a TUM file (`#` comments and blank lines skipped). Throws IoError naming the
/// line that is not 8 numbers or whose quaternion is not of unit length.
std::vector<TimedPose> read_tum_poses(const std::string& path);

// ---------------------------------------------------------------------------------------
// Everything at once: `ndtcu simulate`
// ---------------------------------------------------------------------------------------

/// Sequences that reproduce what makes localization hard (--scenario), each a variation
/// of the drive with its exact truth.
enum class Scenario {
  Drive,       ///< the plain drive at 10 Hz
  Turns,       ///< 1 Hz, a turn at every intersection, brisk: 45 deg or more between two scans
  StopAndGo,   ///< 1 Hz, hard stops, 4 s standing still, hard starts
  Kidnap,      ///< 1 Hz, the sensor jumps kidnap_distance (20 m) to another street at the middle frame
  RoughStart,  ///< the plain drive, plus a start pose 3 m and 30 deg off (initial_pose_rough.txt)
  Fast,        ///< 10 Hz at 20-25 m/s on the straights, a turn at every intersection, tight and hard
};

/// "drive", "turns", "stop-and-go", "kidnap", "rough-start", "fast" (in Scenario's order).
const std::vector<std::string>& scenario_names();
/// The scenario of a name of scenario_names(); throws Error naming --scenario and listing them.
Scenario scenario_from_string(const std::string& name);
/// The name of a scenario.
const char* to_string(Scenario scenario);

/// The simulated IMU (imu.csv, and /imu in the bag of `ndtcu simulate --rosbag`): mounted
/// with the LiDAR's axes, so its angular velocity is the sensor's body rate; each sample
/// the truth plus a constant bias plus white noise drawn from the seed. The defaults are a
/// consumer MEMS IMU's (an automotive-grade part, e.g. Bosch BMI088, after turn-on): gyro
/// noise density 0.014 deg/s/sqrt(Hz), about 0.001 rad/s per sample over a 200 Hz
/// sample's 100 Hz bandwidth; bias left after a static calibration, 0.1-0.25 deg/s per
/// axis; accelerometer 0.02 m/s^2 per sample, bias 0.03-0.05 m/s^2.
struct ImuSettings {
  double rate_hz = 200.0;      ///< samples per second (--imu-rate; 0: no IMU), at most 2000
  double gyro_noise = 0.001;   ///< white noise of the angular velocity, one sigma per sample (rad/s)
  Eigen::Vector3d gyro_bias{0.003, -0.002, 0.004};  ///< constant angular velocity bias (rad/s)
  double accel_noise = 0.02;   ///< white noise of the linear acceleration, one sigma per sample (m/s^2)
  Eigen::Vector3d accel_bias{0.05, -0.03, 0.04};    ///< constant linear acceleration bias (m/s^2)
};

/// The IMU samples of a drive: at times k / rate_hz from 0 through `end_time` (s; the last
/// sweep's end). Angular velocity: the sensor's body rate (the rotation between the drive's
/// poses 10 us apart about each time, in the sensor frame), plus bias and noise; linear
/// acceleration: the specific force R^T (a + 9.80665 z), a from the poses 1 ms apart, plus
/// bias and noise. Noise is drawn per sample from (seed, k): the same bytes on every run.
/// Throws Error for settings outside their ranges (naming the option).
std::vector<ImuSample> simulate_imu(const Drive& drive, double frame_rate_hz, double end_time, const ImuSettings& imu,
                                    std::uint64_t seed);

/// Options of a whole simulated data set.
struct SimulationSettings {
  WorldSettings world;             ///< the scene
  LidarModel lidar = lidar_preset("hdl32");  ///< the sensor
  TrajectorySettings trajectory;   ///< the drive (its seed is derived from world.seed)
  MapSettings map;                 ///< the map (its seed is derived from world.seed)
  /// When non-zero, the columns of `lidar` are chosen so that a scan has about this many
  /// points (--scan-points), from a pilot scan at the first pose.
  std::size_t scan_points = 0;
  /// Keep every this-many-th point of each scan (1: all; --keep-every), as a keyframe store
  /// that thins its scans does: 3 makes a 32-ring sensor's scans as sparse as a campus
  /// robot's HDL-32E keyframes.
  std::size_t keep_every = 1;
  PcdEncoding encoding = PcdEncoding::BinaryCompressed;  ///< PCD encoding of map and scans
  unsigned threads = 0;            ///< worker threads, at most kMaxThreads; 0: one per hardware thread
  Scenario scenario = Scenario::Drive;  ///< the name world.json records (apply_scenario() sets the rest)
  /// Write initial_pose_rough.txt: the first pose moved rough_start_offset (m) horizontally
  /// in a direction drawn from the seed and turned rough_start_yaw_deg about the vertical,
  /// clockwise or counter-clockwise as the seed draws.
  bool rough_start = false;
  double rough_start_offset = 3.0;    ///< m
  double rough_start_yaw_deg = 30.0;  ///< deg
  /// When non-zero, the map is written as a tiled map in the folder `map/` (tiles of this
  /// many metres, Autoware's layout; write_tiled_map(), never whole in memory) instead of
  /// map.pcd (--map-tile-size).
  double map_tile_size = 0.0;
  /// Seconds a scan's sweep takes (--sweep-time, 0 to kMaxSweepTime and at most the frame
  /// period): 0 makes every scan at one instant (no motion distortion); above 0 each point
  /// is taken at its own time along the drive (cast_sweep()), written as field `t`
  /// (float32 seconds from the sweep's start), and the pose of a scan is the sensor's pose
  /// at the sweep's start, its reference time.
  double sweep_time = 0.0;
  /// The IMU written as imu.csv (ndtcu/imu.hpp; rate_hz 0: none).
  ImuSettings imu;
  /// When non-zero (1 to 2000), the sensor's true pose this many times a second over the
  /// whole drive (through the last sweep) is written as odometry_tum.txt (TUM, world frame,
  /// as poses_tum.txt): an odometry denser than the scans, whose motion changes within a
  /// sweep as the drive's does (--odometry-rate; 0: none).
  double odometry_rate_hz = 0.0;
};

/// Sets `scenario` and what it changes in `settings` (set trajectory.frames first: the
/// kidnap goes to its middle frame):
/// - Drive: rate 10 Hz; nothing else.
/// - Turns: rate 1 Hz, from a standstill, a turn at every intersection where one is
///   possible, town speeds (5-9 m/s on the straights), turn radius 5 m (the lanes 3.5 m
///   and 6.5 m), cornering at 5 m/s^2 (4.2 m/s and 68 deg/s through a right turn, 5.7 m/s
///   and 50 deg/s through a left one). A 90 deg turn then takes 1.3-1.8 s, so two
///   consecutive scans around it differ by 45 deg or more.
/// - StopAndGo: rate 1 Hz, from a standstill; stops 25 m after the start and every 100 m
///   after it, braking at 6 m/s^2 (hard), 4 s standing (4 scans), accelerating at
///   3.5 m/s^2 (hard); a constant-velocity prediction overshoots into each stop and lags
///   behind each start.
/// - Kidnap: rate 1 Hz; at frame frames / 2 the sensor lands trajectory.kidnap_distance
///   away (20 m; set it after this call, as --kidnap-distance does) on another street (or the
///   other direction of its own) and drives on from there.
/// - RoughStart: rate 10 Hz, the plain drive, with rough_start (3 m, 30 deg).
/// - Fast: rate 10 Hz, what motion distortion is measured on: 20-25 m/s cruise on the
///   straights (the drive starts at its cruise speed), a turn at every intersection where
///   one is possible, turn radius 4 m (the right lane 2.5 m), cornering at 9 m/s^2 (4.7 m/s
///   and 108 deg/s through a right turn), accelerating at 4 and braking at 8 m/s^2. With
///   --sweep-time 0.1 a scan's points are up to 2.5 m or 11 deg apart in the sensor's motion.
/// A rate given afterwards (--rate) replaces the scenario's.
void apply_scenario(SimulationSettings& settings, Scenario scenario);

/// What simulate() made, with how long each part took.
struct SimulationSummary {
  std::size_t primitives = 0;         ///< primitives in the scene
  SceneContents contents;             ///< buildings, trees, ...
  std::size_t map_points = 0;         ///< points in map.pcd, or in the tiles of map/
  std::size_t map_tiles = 0;          ///< tiles in map/ (0: the map is map.pcd)
  std::size_t frames = 0;             ///< scans written
  int columns = 0;                    ///< columns per revolution actually used
  std::size_t scan_points_min = 0;    ///< fewest points in a scan
  std::size_t scan_points_max = 0;    ///< most points in a scan
  std::size_t scan_points_total = 0;  ///< points over all scans
  double path_length = 0.0;           ///< metres driven from the first to the last pose
  double max_turn_deg = 0.0;          ///< largest rotation between consecutive poses (deg)
  double max_step = 0.0;              ///< largest translation between consecutive poses (m)
  double seconds_world = 0.0;         ///< scene generation and acceleration structures
  double seconds_map = 0.0;           ///< map sampling, filtering and writing
  double seconds_scans = 0.0;         ///< ray casting and writing every scan
  double seconds_total = 0.0;         ///< everything
};

/// Checks every part of the settings; throws Error naming the option and value.
void validate(const SimulationSettings& settings);

/// Generates the world, trajectory, map and scans and writes into `out_dir` (created if
/// needed): map.pcd (world frame; or the tiled folder map/, see map_tile_size), scans/000000.pcd ... (sensor frame, x y z
/// intensity), poses_tum.txt and poses_kitti.txt (T_world_sensor per scan, origin
/// included, times frame / rate), imu.csv (simulate_imu() through the last sweep, unless
/// imu.rate_hz is 0), world.json (every parameter), and with rough_start
/// initial_pose_rough.txt (one TUM line at the first scan's time; an earlier run's is
/// removed otherwise). Throws Error or IoError.
SimulationSummary simulate(const SimulationSettings& settings, const std::string& out_dir);

}  // namespace ndtcu::sim
