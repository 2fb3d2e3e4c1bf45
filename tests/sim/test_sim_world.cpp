// Ray casting against primitives and ground, checked against closed-form answers and
// against a brute-force search; scene validation.
#include "../support/test_support.hpp"

#include "sim/random.hpp"
#include "sim/world_data.hpp"

#include <ndtcu/simulator.hpp>

#include <cmath>

using namespace ndtcu;
using namespace ndtcu::sim;

namespace {

constexpr double kPi = 3.14159265358979323846;

/// A flat ground patch, so a world made only of primitives is still valid and rays that
/// miss the primitive still end somewhere predictable.
Heightfield flat_ground(double half, double z, double cell = 1.0) {
  Heightfield g;
  g.cell = cell;
  g.nx = g.ny = static_cast<int>(2 * half / cell);
  g.min_corner = Eigen::Vector2d::Constant(-half);
  g.heights.assign(static_cast<std::size_t>(g.nx + 1) * (g.ny + 1), static_cast<float>(z));
  return g;
}

Eigen::Vector3d unit(double x, double y, double z) { return Eigen::Vector3d(x, y, z).normalized(); }

}  // namespace

TEST_CASE("rays meet boxes, cylinders and spheres where geometry says", "[unit][sim]") {
  Scene s;
  OrientedBox plain;
  plain.half_extents = {1, 2, 3};
  s.boxes.push_back(plain);
  OrientedBox turned;
  turned.center = {0, 20, 0};
  turned.half_extents = {1, 1, 1};
  turned.yaw = kPi / 4;
  s.boxes.push_back(turned);
  Cylinder pole;
  pole.center = {5, -20};
  pole.radius = 0.5;
  pole.z_min = 0;
  pole.z_max = 2;
  s.cylinders.push_back(pole);
  Sphere ball;
  ball.center = {0, -40, 5};
  ball.radius = 1;
  s.spheres.push_back(ball);
  const World w(s);

  auto hit = w.cast({-10, 0, 0}, {1, 0, 0}, 100);
  REQUIRE(hit);
  CHECK(hit->range == Approx(9.0).margin(1e-12));
  CHECK(hit->normal.isApprox(Eigen::Vector3d(-1, 0, 0)));

  // Yaw 45 deg, ray along +x at y = 20.3: it enters through the box's local +y face at
  // x = -(1 - 0.3 cos45) / sin45.
  const double c = std::cos(kPi / 4);
  hit = w.cast({-10, 20.3, 0}, {1, 0, 0}, 100);
  REQUIRE(hit);
  CHECK(hit->range == Approx(10.0 - (1.0 - 0.3 * c) / c).margin(1e-12));
  CHECK(hit->normal.isApprox(Eigen::Vector3d(-c, c, 0), 1e-12));

  hit = w.cast({0, -20, 1}, {1, 0, 0}, 100);  // cylinder side
  REQUIRE(hit);
  CHECK(hit->range == Approx(4.5).margin(1e-12));
  CHECK(hit->normal.isApprox(Eigen::Vector3d(-1, 0, 0)));
  hit = w.cast({5, -20, 10}, {0, 0, -1}, 100);  // cylinder top cap
  REQUIRE(hit);
  CHECK(hit->range == Approx(8.0).margin(1e-12));
  CHECK(hit->normal.isApprox(Eigen::Vector3d(0, 0, 1)));
  CHECK_FALSE(w.cast({0, -20, 3}, {1, 0, 0}, 100));  // passes above the pole

  hit = w.cast({0, -40, 0}, {0, 0, 1}, 100);  // sphere from below
  REQUIRE(hit);
  CHECK(hit->range == Approx(4.0).margin(1e-12));
  CHECK(hit->normal.isApprox(Eigen::Vector3d(0, 0, -1)));

  CHECK_FALSE(w.cast({-10, 0, 0}, {1, 0, 0}, 8.5));  // beyond max range
  CHECK_FALSE(w.cast({0, 0, 0}, {1, 0, 0}, 100));    // starts inside the box: the solid is not seen
  CHECK(w.inside_solid({0.5, 1.5, 2.5}, 1e-3));
  CHECK_FALSE(w.inside_solid({0.9995, 0, 0}, 1e-3));  // within the tolerance of a face
}

TEST_CASE("a ray through a window opening ends on the glass or a reveal", "[unit][sim]") {
  Scene s;
  FacadeBox f;
  f.box.center = {0, 0, 5};
  f.box.half_extents = {5, 5, 5};  // x in [-5, 5], z in [0, 10]
  f.box.reflectivity = 0.5f;
  WindowGrid& g = f.windows;
  g.pitch = 2.0;
  g.width = 1.0;
  g.floor_height = 3.0;
  g.height = 1.5;
  g.sill = 1.0;
  g.depth = 0.3;
  g.margin = 1.0;
  g.base_z = 0.0;
  g.top_margin = 0.5;
  g.glass_reflectivity = 0.05f;
  s.facades.push_back(f);
  const World w(s);
  // Face length 10, margin 1: four 2 m slots centred, windows at u = -3, -1, 1, 3 (1 m
  // wide); rows at z in [1, 2.5], [4, 5.5], [7, 8.5] (the fourth would end above 9.5).
  auto glass = w.cast({-20, -1, 1.75}, {1, 0, 0}, 100);
  REQUIRE(glass);
  CHECK(glass->range == Approx(15.3).margin(1e-12));
  CHECK(glass->reflectivity == 0.05f);
  CHECK(glass->normal.isApprox(Eigen::Vector3d(-1, 0, 0)));

  auto wall = w.cast({-20, 0, 1.75}, {1, 0, 0}, 100);  // u = 0 lies between two windows
  REQUIRE(wall);
  CHECK(wall->range == Approx(15.0).margin(1e-12));
  CHECK(wall->reflectivity == 0.5f);

  CHECK(w.cast({-20, -1, 9.0}, {1, 0, 0}, 100)->range == Approx(15.0));  // no fourth row

  // Steeply down through the opening of the first-floor window: the sill (z = 4) stops it.
  const Eigen::Vector3d d = unit(1, 0, -1);
  auto sill = w.cast(Eigen::Vector3d(-5.0, -1.0, 4.2) - 1.0 * d, d, 100);
  REQUIRE(sill);
  CHECK(sill->normal.isApprox(Eigen::Vector3d(0, 0, 1)));
  CHECK(sill->range == Approx(1.0 + 0.2 * std::sqrt(2.0)).margin(1e-12));

  // Recesses are empty space; the wall around them is solid.
  CHECK_FALSE(w.inside_solid({-4.85, -1.0, 1.75}, 1e-3));
  CHECK(w.inside_solid({-4.6, -1.0, 1.75}, 1e-3));
  CHECK(w.inside_solid({-4.85, 0.0, 1.75}, 1e-3));
}

TEST_CASE("ground hits lie on the triangulated heightfield, nearest first", "[unit][sim]") {
  // A tilted plane is represented exactly by the triangles: the hit has a closed form.
  Scene plane;
  plane.ground = flat_ground(10.0, 0.0, 0.5);
  const double a = 0.1, b = -0.05, c = 0.3;
  for (int j = 0; j <= plane.ground.ny; ++j) {
    for (int i = 0; i <= plane.ground.nx; ++i) {
      const double x = -10.0 + 0.5 * i, y = -10.0 + 0.5 * j;
      plane.ground.heights[static_cast<std::size_t>(j) * (plane.ground.nx + 1) + i] = static_cast<float>(a * x + b * y + c);
    }
  }
  const World flat(plane);
  detail::Rng rng(5);
  for (int k = 0; k < 500; ++k) {
    const Eigen::Vector3d o(rng.uniform(-8, 8), rng.uniform(-8, 8), rng.uniform(2, 6));
    const Eigen::Vector3d d = unit(rng.uniform(-1, 1), rng.uniform(-1, 1), -rng.uniform(0.05, 1));
    const double t = (a * o.x() + b * o.y() + c - o.z()) / (d.z() - a * d.x() - b * d.y());
    const Eigen::Vector3d p = o + t * d;
    auto hit = flat.cast(o, d, 100);
    if (std::abs(p.x()) > 10 || std::abs(p.y()) > 10) {
      CHECK_FALSE(hit);
      continue;
    }
    REQUIRE(hit);
    // Heights are float: the plane is met to float precision of its heights.
    CHECK(hit->range == Approx(t).margin(1e-5));
    CHECK(hit->normal.isApprox(Eigen::Vector3d(-a, -b, 1).normalized(), 1e-5));
  }

  // Rough random terrain: the grid walk must find the same first triangle as testing all.
  Scene rough;
  rough.ground = flat_ground(8.0, 0.0, 0.5);
  for (auto& h : rough.ground.heights) h = static_cast<float>(rng.uniform(-0.8, 0.8));
  const World bumpy(rough);
  const Heightfield& g = rough.ground;
  int hits = 0;
  for (int k = 0; k < 2000; ++k) {
    const Eigen::Vector3d o(rng.uniform(-10, 10), rng.uniform(-10, 10), rng.uniform(0.9, 3));
    const Eigen::Vector3d d = unit(rng.uniform(-1, 1), rng.uniform(-1, 1), -rng.uniform(0.0, 0.6));
    // Brute force: the plane of every triangle, then the point inside its cell half.
    double best = 1e300;
    for (int j = 0; j < g.ny; ++j) {
      for (int i = 0; i < g.nx; ++i) {
        auto v = [&](int di, int dj) {
          return Eigen::Vector3d(-8.0 + 0.5 * (i + di), -8.0 + 0.5 * (j + dj),
                                 g.heights[static_cast<std::size_t>(j + dj) * (g.nx + 1) + i + di]);
        };
        const Eigen::Vector3d p00 = v(0, 0), p10 = v(1, 0), p11 = v(1, 1), p01 = v(0, 1);
        for (int tri = 0; tri < 2; ++tri) {
          const Eigen::Vector3d q1 = tri == 0 ? p10 : p11, q2 = tri == 0 ? p11 : p01;
          const Eigen::Vector3d n = (q1 - p00).cross(q2 - p00);
          const double t = n.dot(p00 - o) / n.dot(d);
          if (!(t > 0) || t >= best || t > 30) continue;
          const Eigen::Vector3d p = o + t * d;
          const double fx = (p.x() - p00.x()) / 0.5, fy = (p.y() - p00.y()) / 0.5;
          const bool in_cell = fx >= 0 && fx <= 1 && fy >= 0 && fy <= 1;
          if (in_cell && (tri == 0 ? fx >= fy : fy >= fx)) best = t;
        }
      }
    }
    auto hit = bumpy.cast(o, d, 30);
    CAPTURE(k, o.transpose(), d.transpose(), best);
    if (best > 30) {
      CHECK_FALSE(hit);
    } else {
      REQUIRE(hit);
      CHECK(hit->range == Approx(best).margin(1e-9));
      ++hits;
    }
  }
  CHECK(hits > 500);  // the comparison covered many hits, not only misses
}

TEST_CASE("the BVH finds the same first hit as testing every primitive", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 11;
  ws.size = 120;
  const World w(generate_scene(ws));
  REQUIRE(w.scene().primitive_count() > 300);
  detail::Rng rng(77);
  int found = 0;
  for (int k = 0; k < 20000; ++k) {
    const double x = rng.uniform(-60, 60), y = rng.uniform(-60, 60);
    const Eigen::Vector3d o(x, y, w.ground_height(x, y) + rng.uniform(0.5, 12));
    const Eigen::Vector3d d = unit(rng.normal(), rng.normal(), 0.5 * rng.normal());
    Hit fast, slow;
    const bool a = detail::cast_primitives(w.data(), o, d, 80, fast);
    const bool b = detail::cast_primitives_brute_force(w.data(), o, d, 80, slow);
    REQUIRE(a == b);
    if (!a) continue;
    ++found;
    // Ties at equal range go to the lower primitive in both, so the answers are identical.
    CHECK(fast.range == slow.range);
    CHECK(fast.normal == slow.normal);
    CHECK(fast.reflectivity == slow.reflectivity);
  }
  CHECK(found > 5000);
}

TEST_CASE("the generated scene has streets, buildings, trees, vehicles and a free driving lane", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 3;
  ws.size = 300;
  ws.origin = {680000, 3900000, 40};
  const Scene s = generate_scene(ws);
  CHECK(s.contents.buildings > 5);
  CHECK(s.contents.trees > 20);
  CHECK(s.contents.vehicles > 10);
  CHECK(s.contents.poles > 5);
  CHECK(s.roads.nodes.size() >= 4);
  CHECK(s.origin == ws.origin);
  const World w(s);
  // Along every street, the driving line at sensor height is clear of solids.
  for (const auto& [a, b] : s.roads.edges) {
    const Eigen::Vector2d p0 = s.roads.nodes[static_cast<std::size_t>(a)], p1 = s.roads.nodes[static_cast<std::size_t>(b)];
    const Eigen::Vector2d dir = (p1 - p0).normalized(), right(dir.y(), -dir.x());
    for (double t = 0; t <= (p1 - p0).norm(); t += 0.5) {
      for (double side : {-1.0, 1.0}) {
        const Eigen::Vector2d q = p0 + t * dir + side * s.roads.lane_offset * right;
        const double g = w.ground_height(q.x(), q.y());
        REQUIRE(std::isfinite(g));
        for (double h : {0.5, 1.0, 1.8, 2.5}) CHECK_FALSE(w.inside_solid({q.x(), q.y(), g + h}, 0.0));
      }
    }
  }
}

TEST_CASE("scenes and world settings that cannot work are refused with the reason", "[unit][sim]") {
  CHECK_THROWS_WITH(World(Scene{}), Catch::Contains("world is empty"));
  Scene bad_box;
  bad_box.boxes.emplace_back();
  bad_box.boxes[0].half_extents.y() = 0;
  CHECK_THROWS_WITH(World(bad_box), Catch::Contains("boxes[0].half_extents must be positive"));
  Scene bad_sphere;
  bad_sphere.spheres.emplace_back();
  bad_sphere.spheres[0].radius = -1;
  CHECK_THROWS_WITH(World(bad_sphere), Catch::Contains("spheres[0].radius must be positive, got -1"));
  Scene bad_ground;
  bad_ground.ground = flat_ground(5, 0);
  bad_ground.ground.heights.pop_back();
  CHECK_THROWS_WITH(World(bad_ground), Catch::Contains("ground: heights has"));

  WorldSettings ws;
  ws.size = 0;
  CHECK_THROWS_WITH(generate_scene(ws), Catch::Contains("--world-size") && Catch::Contains("got 0"));
  ws.size = 1e5;
  CHECK_THROWS_WITH(generate_scene(ws), Catch::Contains("--world-size") && Catch::Contains("got 100000"));

  CHECK(parse_origin("680000,3900000,40") == Eigen::Vector3d(680000, 3900000, 40));
  CHECK(parse_origin(" -1.5, 2e3 ,0") == Eigen::Vector3d(-1.5, 2000, 0));
  for (const char* bad : {"1,2", "1,2,3,4", "a,b,c", "1,,3", "", "1,2,nan"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(parse_origin(bad), Catch::Contains("--origin") && Catch::Contains(std::string("'") + bad + "'"));
  }
}

TEST_CASE("the normal transform of the counter hash has mean 0 and variance 1", "[unit][sim]") {
  // 200k draws: the standard errors are 0.0022 (mean) and 0.0032 (variance); the bounds
  // are five of them.
  const int n = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = detail::normal_from_bits(detail::hash4(1, 2, 3, 2 * i), detail::hash4(1, 2, 3, 2 * i + 1));
    sum += z;
    sum2 += z * z;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  CHECK(std::abs(mean) < 0.011);
  CHECK(std::abs(var - 1.0) < 0.016);
}
