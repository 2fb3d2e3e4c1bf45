// ndtcu::pcl::NormalDistributionsTransform, the drop-in for PCL's NDT, against PCL's own
// class (PCL 1.13, the installed one):
//  - PCL's NDT tutorial built against each class (ndt_tutorial.cpp, compiled twice): the
//    same pose, iterations, convergence, likelihood and output cloud, on the CPU backend
//    and (the `gpu` test) on CUDA;
//  - synthetic scenes, without the data folder: the same pose from guesses whose rotation
//    PCL parametrizes in two different ways, the same iteration limit behaviour, defaults;
//  - what PCL's class does not show: errors, the cached voxel map, non-finite points,
//    other point types, use through a pcl::Registration reference.
//
// Tolerances, as in tests/ndt/parity_pcl.cpp: final pose within 1e-4 m and 1e-4 rad of
// PCL's, iterations equal, likelihood equal to 1e-6 relative. Both compute the same float
// transforms and neighbour sets and differ in the order of the double sums (about 1e-13
// relative per evaluation), which the iterations amplify to far below these bounds.
#include "../support/test_support.hpp"
#include "../ndt/synthetic.hpp"
#include "ndt_tutorial.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/pcl/ndt.hpp>

#include <pcl/common/io.h>
#include <pcl/common/transforms.h>
#include <pcl/point_cloud.h>
#include <pcl/point_types.h>
#include <pcl/registration/ndt.h>

#include <Eigen/Geometry>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>

using ndtcu::Backend;
using ndtcu::CudaError;
using ndtcu::Pose6;
using ndtcu::StopReason;
using ndtcu::cuda_compiled;
using ndtcu::cuda_devices;
using ndtcu::pose_to_matrix;
using ndtcu::to_string;
namespace test = ndtcu::test;

namespace {

using Cloud = pcl::PointCloud<pcl::PointXYZ>;
using PclNdt = pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ>;
using DropIn = ndtcu::pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ>;

Cloud::Ptr to_pcl(const ndtcu::PointCloud& c) {
  Cloud::Ptr out(new Cloud);
  for (const auto& p : c.points) out->push_back(pcl::PointXYZ(p.x(), p.y(), p.z()));
  return out;
}

// Translation distance (m) and rotation angle (rad) between two transforms.
std::pair<double, double> pose_difference(const Eigen::Matrix4f& a, const Eigen::Matrix4f& b) {
  const Eigen::Matrix4d ad = a.cast<double>(), bd = b.cast<double>();
  const double dt = (ad.topRightCorner<3, 1>() - bd.topRightCorner<3, 1>()).norm();
  const Eigen::Matrix3d dr = ad.topLeftCorner<3, 3>().transpose() * bd.topLeftCorner<3, 3>();
  return {dt, Eigen::AngleAxisd(dr).angle()};
}

// What the PCL program would print to stderr while `f` runs (PCL_ERROR and PCL_WARN go to
// the stderr stream), captured through a file.
std::string capture_stderr(const std::function<void()>& f) {
  const std::filesystem::path path = test::temp_dir("pcl_ndt_stderr") / "stderr.txt";
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  dup2(fileno(file), 2);
  struct Restore {
    int saved;
    FILE* file;
    ~Restore() {
      std::fflush(stderr);
      dup2(saved, 2);
      close(saved);
      std::fclose(file);
    }
  };
  {
    Restore restore{saved, file};
    f();
  }
  return test::read_bytes(path);
}

// A synthetic target and a source moved by the inverse of `truth`, as PCL clouds.
struct Scene {
  Cloud::Ptr target, source;
  Pose6 truth;
};

Scene make_scene() {
  Scene s;
  s.truth << 0.4, -0.3, 0.05, 0.01, -0.015, 0.12;
  s.target = to_pcl(test::synthetic_scene(7, 30000));
  s.source = to_pcl(test::moved_by_inverse(test::synthetic_scene(11, 4000), s.truth));
  return s;
}

template <class Ndt>
void configure(Ndt& ndt, const Scene& s) {
  ndt.setTransformationEpsilon(1e-4);
  ndt.setStepSize(0.5);
  ndt.setResolution(1.0f);
  ndt.setMaximumIterations(35);
  ndt.setInputSource(s.source);
  ndt.setInputTarget(s.target);
}

}  // namespace

TEST_CASE("The drop-in's defaults are PCL's", "[unit][pcl]") {
  PclNdt pcl_ndt;
  DropIn ours;
  CHECK(ours.getResolution() == pcl_ndt.getResolution());
  CHECK(ours.getStepSize() == pcl_ndt.getStepSize());
  CHECK(ours.getOulierRatio() == pcl_ndt.getOulierRatio());
  CHECK(ours.getTransformationEpsilon() == pcl_ndt.getTransformationEpsilon());
  CHECK(ours.getMaximumIterations() == pcl_ndt.getMaximumIterations());
  CHECK(ours.getBackend() == Backend::Cpu);
  DropIn other;
  other.setOutlierRatio(0.3);
  CHECK(other.getOulierRatio() == 0.3);
  other.setOulierRatio(0.4);
  CHECK(other.getOutlierRatio() == 0.4);
}

TEST_CASE("The drop-in gives PCL's pose on a synthetic scene, however PCL parametrizes the guess", "[unit][pcl]") {
  const Scene scene = make_scene();
  // PCL starts from Eigen's eulerAngles(0, 1, 2) of the guess, which keeps roll in [0, pi]:
  // a guess with a negative roll starts near (pi, -pi, yaw - pi), and the Newton iterations
  // run in those angles. Both guesses must follow PCL's path, not only reach its end.
  //
  // One step of PCL's cannot be taken through ndtcu's aligner: PCL's first evaluation uses
  // the guess matrix itself, the later ones the transform rebuilt from the angles, which
  // differs from the guess by float rounding (1.9e-7 here for the negative roll). From that
  // guess PCL's own end moves by 4.8e-4 m when it is started at the rebuilt transform (the
  // stopping rule, a step under 1 cm, ends wherever the path crosses it). The drop-in is
  // compared with PCL started at the rebuilt transform, where both run the same steps, and
  // the spread of PCL's own two runs is printed.
  Pose6 near = scene.truth, negative_roll = scene.truth;
  near(0) += 0.3;
  near(1) -= 0.2;
  near(5) += 0.05;
  negative_roll(0) -= 0.25;
  negative_roll(3) = -0.02;
  for (const Pose6& guess_pose : {near, negative_roll}) {
    Eigen::Matrix4f guess, rebuilt;
    PclNdt::convertTransform(guess_pose, guess);
    const Eigen::Affine3f guess_affine(guess);
    Pose6 pcl_start;
    pcl_start << guess_pose.head<3>(), guess_affine.rotation().eulerAngles(0, 1, 2).cast<double>();
    PclNdt::convertTransform(pcl_start, rebuilt);
    PclNdt pcl_ndt, pcl_from_guess;
    configure(pcl_ndt, scene);
    configure(pcl_from_guess, scene);
    Cloud pcl_out;
    pcl_ndt.align(pcl_out, rebuilt);
    pcl_from_guess.align(pcl_out, guess);
    DropIn ours;
    configure(ours, scene);
    ours.setNumberOfThreads(2);
    Cloud our_out;
    ours.align(our_out, guess);

    const auto [dt, da] = pose_difference(ours.getFinalTransformation(), pcl_ndt.getFinalTransformation());
    const auto [pcl_dt, pcl_da] =
        pose_difference(pcl_from_guess.getFinalTransformation(), pcl_ndt.getFinalTransformation());
    const auto [truth_dt, truth_da] =
        pose_difference(ours.getFinalTransformation(), pose_to_matrix(scene.truth).cast<float>());
    std::printf("synthetic, guess roll %+.2f (PCL's start roll %.4f): pcl %d it, ndtcu %d it, dt %.2e m, "
                "da %.2e rad; pcl from the guess matrix %d it, %.2e m / %.2e rad from pcl; ndtcu from truth "
                "%.1e m\n",
                guess_pose(3), pcl_start(3), pcl_ndt.getFinalNumIteration(), ours.getFinalNumIteration(), dt, da,
                pcl_from_guess.getFinalNumIteration(), pcl_dt, pcl_da, truth_dt);
    INFO("guess roll " << guess_pose(3) << ": " << to_string(ours.getAlignResult().reason));
    CHECK(ours.hasConverged() == pcl_ndt.hasConverged());
    CHECK(ours.getFinalNumIteration() == pcl_ndt.getFinalNumIteration());
    CHECK(dt < 1e-4);
    CHECK(da < 1e-4);
    CHECK(std::abs(ours.getTransformationLikelihood() - pcl_ndt.getTransformationLikelihood()) <=
          1e-6 * std::abs(pcl_ndt.getTransformationLikelihood()));
    // It found the truth (noise 1 cm): the comparison is between two real alignments.
    CHECK(truth_dt < 0.02);
    CHECK(truth_da < 0.005);
  }
}

TEST_CASE("The drop-in's hasConverged is PCL's at the iteration limit", "[unit][pcl]") {
  const Scene scene = make_scene();
  Pose6 guess_pose = scene.truth;
  guess_pose(0) += 0.5;
  Eigen::Matrix4f guess;
  PclNdt::convertTransform(guess_pose, guess);
  PclNdt pcl_ndt;
  configure(pcl_ndt, scene);
  pcl_ndt.setMaximumIterations(2);
  Cloud out;
  pcl_ndt.align(out, guess);
  DropIn ours;
  configure(ours, scene);
  ours.setMaximumIterations(2);
  ours.align(out, guess);
  // PCL sets converged_ when the loop ends at max_iterations too.
  CHECK(pcl_ndt.hasConverged());
  CHECK(ours.hasConverged());
  CHECK(ours.getFinalNumIteration() == 2);
  CHECK(pcl_ndt.getFinalNumIteration() == 2);
  // The strict answer is in the aligner's result.
  CHECK_FALSE(ours.getAlignResult().converged);
  CHECK(ours.getAlignResult().reason == StopReason::MaxIterations);
  const auto [dt, da] = pose_difference(ours.getFinalTransformation(), pcl_ndt.getFinalTransformation());
  CHECK(dt < 1e-4);
  CHECK(da < 1e-4);
  // PCL's last increment: the last iteration's step as a transform.
  const auto& trace = ours.getAlignResult().trace;
  REQUIRE(trace.size() == 2);
  Eigen::Matrix4f last;
  DropIn::convertTransform(trace[1].pose - trace[0].pose, last);
  CHECK(ours.getLastIncrementalTransformation().isApprox(last));
  CHECK(ours.getLastIncrementalTransformation().topRightCorner<3, 1>().norm() > 0.0f);
}

TEST_CASE("The drop-in aligns through a pcl::Registration reference, any point type, NaN points", "[unit][pcl]") {
  const Scene scene = make_scene();
  Pose6 guess_pose = scene.truth;
  guess_pose(1) += 0.3;
  Eigen::Matrix4f guess;
  DropIn::convertTransform(guess_pose, guess);

  DropIn reference;
  configure(reference, scene);
  Cloud reference_out;
  reference.align(reference_out, guess);
  REQUIRE(reference.hasConverged());

  SECTION("through the base class, the output is the source moved by the final transform") {
    DropIn ours;
    configure(ours, scene);
    pcl::Registration<pcl::PointXYZ, pcl::PointXYZ, float>& registration = ours;
    Cloud out;
    registration.align(out, guess);
    CHECK(registration.hasConverged());
    CHECK(registration.getFinalTransformation() == reference.getFinalTransformation());
    Cloud expected;
    pcl::transformPointCloud(*scene.source, expected, registration.getFinalTransformation());
    REQUIRE(out.size() == expected.size());
    std::size_t different = 0;
    for (std::size_t i = 0; i < out.size(); ++i) different += out[i].getVector3fMap() != expected[i].getVector3fMap();
    CHECK(different == 0);
  }
  SECTION("PointXYZI source: intensity carried to the output; NaN points ignored, but counted as PCL does") {
    pcl::PointCloud<pcl::PointXYZI>::Ptr source(new pcl::PointCloud<pcl::PointXYZI>);
    for (std::size_t i = 0; i < scene.source->size(); ++i) {
      const auto& p = (*scene.source)[i];
      pcl::PointXYZI q;
      q.x = p.x;
      q.y = p.y;
      q.z = p.z;
      q.intensity = static_cast<float>(i % 256);
      source->push_back(q);
      if (i % 100 == 0) {  // a NaN point after every 100th
        q.x = q.y = q.z = std::numeric_limits<float>::quiet_NaN();
        source->push_back(q);
      }
    }
    source->is_dense = false;
    // Both clouds PointXYZI: PCL 1.13's Registration does not compile with two point types
    // (its reciprocal kd-tree is typed on the source and handed to a target-typed setter).
    pcl::PointCloud<pcl::PointXYZI>::Ptr target(new pcl::PointCloud<pcl::PointXYZI>);
    pcl::copyPointCloud(*scene.target, *target);
    ndtcu::pcl::NormalDistributionsTransform<pcl::PointXYZI, pcl::PointXYZI> ours;
    ours.setTransformationEpsilon(1e-4);
    ours.setStepSize(0.5);
    ours.setInputSource(source);
    ours.setInputTarget(target);
    pcl::PointCloud<pcl::PointXYZI> out;
    ours.align(out, guess);
    CHECK(ours.hasConverged());
    CHECK(ours.getFinalTransformation() == reference.getFinalTransformation());
    CHECK(ours.getFinalNumIteration() == reference.getFinalNumIteration());
    // PCL divides the score by the whole input, NaN points included.
    const double score = ours.getAlignResult().score;
    CHECK(ours.getTransformationLikelihood() == score / static_cast<double>(source->size()));
    CHECK(ours.getAlignResult().source_points == scene.source->size());
    REQUIRE(out.size() == source->size());
    CHECK(out[6].intensity == 5.0f);  // after the NaN point that follows point 0
    CHECK(std::isnan(out[1].x));
  }
}

TEST_CASE("The drop-in keeps the target's voxel map until the target or the resolution changes", "[unit][pcl]") {
  const Scene scene = make_scene();
  Cloud::Ptr target(new Cloud(*scene.target));
  DropIn ndt;
  ndt.setTransformationEpsilon(1e-4);
  ndt.setStepSize(0.5);
  ndt.setInputSource(scene.source);
  ndt.setInputTarget(target);
  Cloud out;
  ndt.align(out);
  const std::size_t full_voxels = ndt.getAlignResult().target_voxels;
  REQUIRE(full_voxels > 100);

  // The cloud changes in place, unannounced: the map built from it stays (PCL's too: it
  // builds its grid in setInputTarget).
  target->resize(target->size() / 3);
  ndt.setStepSize(0.4);  // a setting that does not touch the map
  ndt.align(out);
  CHECK(ndt.getAlignResult().target_voxels == full_voxels);
  // Announced: rebuilt from the third that is left.
  ndt.setInputTarget(target);
  ndt.align(out);
  const std::size_t third_voxels = ndt.getAlignResult().target_voxels;
  CHECK(third_voxels < full_voxels);
  // A resolution change rebuilds it, and so does a minimum of points per voxel.
  ndt.setResolution(2.0f);
  ndt.align(out);
  const std::size_t coarse_voxels = ndt.getAlignResult().target_voxels;
  CHECK(coarse_voxels < third_voxels);
  ndt.setMinPointPerVoxel(12);
  ndt.align(out);
  CHECK(ndt.getAlignResult().target_voxels < coarse_voxels);
  CHECK(ndt.getAlignResult().target_voxels > 0);
}

TEST_CASE("The drop-in's errors: missing clouds, settings ndtcu rejects, CUDA without a device", "[unit][pcl]") {
  const Scene scene = make_scene();
  Cloud out;
  SECTION("no source: PCL_ERROR naming setInputSource, nothing converged") {
    DropIn ndt;
    ndt.setInputTarget(scene.target);
    const std::string err = capture_stderr([&] { ndt.align(out); });
    CHECK(err.find("[ndtcu::pcl::NormalDistributionsTransform::align] No input source cloud: call setInputSource() "
                   "before align().") != std::string::npos);
    CHECK_FALSE(ndt.hasConverged());
    CHECK(ndt.getFinalNumIteration() == 0);
    CHECK(ndt.getFinalTransformation() == Eigen::Matrix4f::Identity());
    CHECK(out.empty());
  }
  SECTION("no target: PCL_ERROR naming setInputTarget") {
    DropIn ndt;
    ndt.setInputSource(scene.source);
    const std::string err = capture_stderr([&] { ndt.align(out); });
    CHECK(err.find("No input target cloud: call setInputTarget() before align().") != std::string::npos);
    CHECK_FALSE(ndt.hasConverged());
    CHECK(ndt.getFinalTransformation() == Eigen::Matrix4f::Identity());
  }
  SECTION("a target without a voxel of 6 points: PCL's message") {
    Cloud::Ptr sparse(new Cloud);
    for (int i = 0; i < 50; ++i) sparse->push_back(pcl::PointXYZ(static_cast<float>(i) * 3.f, 0.f, 0.f));
    DropIn ndt;
    ndt.setInputSource(scene.source);
    ndt.setInputTarget(sparse);
    const std::string err = capture_stderr([&] { ndt.align(out); });
    CHECK(err.find("Voxel grid is not searchable!") != std::string::npos);
    CHECK_FALSE(ndt.hasConverged());
    CHECK(ndt.getAlignResult().reason == StopReason::NoVoxels);
  }
  SECTION("settings out of ndtcu's range throw ndtcu::Error naming them") {
    DropIn ndt;
    configure(ndt, scene);
    ndt.setStepSize(-1.0);
    CHECK_THROWS_WITH(ndt.align(out), Catch::Contains("step_size (must be > 0)") &&
                                          Catch::Contains("ndtcu::pcl::NormalDistributionsTransform::align"));
    ndt.setStepSize(0.1);
    ndt.setTransformationEpsilon(0.5);
    CHECK_THROWS_WITH(ndt.align(out), Catch::Contains("epsilon 0.5 is more than twice step_size 0.1"));
    ndt.setTransformationEpsilon(0.01);
    ndt.setTransformationRotationEpsilon(0.999);
    CHECK_THROWS_WITH(ndt.align(out), Catch::Contains("setTransformationRotationEpsilon(0.999) is not supported"));
    ndt.setTransformationRotationEpsilon(0.0);
    ndt.setMaximumIterations(0);
    CHECK_THROWS_WITH(ndt.align(out), Catch::Contains("max_iterations: 0 (must be in [1, 1000])"));
    ndt.setMaximumIterations(35);
    ndt.align(out);  // the object is still usable
    CHECK(ndt.hasConverged());
  }
  SECTION("Backend::Cuda without CUDA: ndtcu::CudaError") {
    if (cuda_compiled() && !cuda_devices().empty()) NDTCU_SKIP("a CUDA device is present");
    DropIn ndt;
    configure(ndt, scene);
    ndt.setBackend(Backend::Cuda);
    CHECK_THROWS_AS(ndt.align(out), CudaError);
    ndt.setBackend(Backend::Cpu);
    ndt.align(out);
    CHECK(ndt.hasConverged());
  }
}

namespace {

void check_tutorial(Backend backend) {
  NDTCU_REQUIRE_DATA(dir, "pairs/room_scan");
  const std::filesystem::path room = dir / "pairs/room_scan";
  const TutorialResult pcl_run = ndt_tutorial_pcl(room, backend);
  const TutorialResult ours = ndt_tutorial_ndtcu(room, backend);
  const auto [dt, da] = pose_difference(ours.transform, pcl_run.transform);
  const Eigen::Vector3f t = ours.transform.topRightCorner<3, 1>();
  const double yaw = std::atan2(ours.transform(1, 0), ours.transform(0, 0));
  std::printf("NDT tutorial (room_scan, %zu target / %zu filtered source points), backend %s:\n"
              "  pcl:   converged %d, %d iterations, likelihood %.9f, fitness %.9f, %.0f ms\n"
              "  ndtcu: converged %d, %d iterations, likelihood %.9f, fitness %.9f, %.0f ms\n"
              "  ndtcu pose x %.6f y %.6f z %.6f yaw %.6f; dt %.2e m, da %.2e rad\n",
              pcl_run.target_points, pcl_run.source_points, to_string(backend), pcl_run.converged,
              pcl_run.iterations, pcl_run.likelihood, pcl_run.fitness, pcl_run.align_ms, ours.converged,
              ours.iterations, ours.likelihood, ours.fitness, ours.align_ms, t.x(), t.y(), t.z(), yaw, dt, da);
  REQUIRE(ours.source_points == pcl_run.source_points);
  CHECK(ours.converged == pcl_run.converged);
  CHECK(ours.iterations == pcl_run.iterations);
  CHECK(dt < 1e-4);
  CHECK(da < 1e-4);
  // The CPU backend computes in double as PCL does; the CUDA backend's pair terms are float
  // (kernels/ndt_loop_kernels.cu, Real), which moves the pose by about 1e-6 and the
  // likelihood by 1.5e-6 of itself here (measured on an H200), hence its looser bound.
  const double likelihood_tolerance = backend == Backend::Cuda ? 1e-5 : 1e-6;
  CHECK(std::abs(ours.likelihood - pcl_run.likelihood) <= likelihood_tolerance * std::abs(pcl_run.likelihood));
  // The output clouds: point p moves by at most dt + da |p| between the two transforms.
  REQUIRE(ours.aligned.size() == pcl_run.aligned.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < ours.aligned.size(); ++i) {
    const double d = (ours.aligned[i].getVector3fMap() - pcl_run.aligned[i].getVector3fMap()).norm();
    const double radius = static_cast<double>(pcl_run.aligned[i].getVector3fMap().norm());
    worst = std::max(worst, d - (1e-4 + 1e-4 * radius));
  }
  CHECK(worst <= 0.0);
  // getFitnessScore (Registration's, on its kd-tree of the target) at nearly the same pose.
  CHECK(std::abs(ours.fitness - pcl_run.fitness) <= 1e-3 * pcl_run.fitness);
}

}  // namespace

TEST_CASE("PCL's NDT tutorial gives PCL's pose with the drop-in (CPU)", "[data][parity][pcl]") {
  check_tutorial(Backend::Cpu);
}

TEST_CASE("PCL's NDT tutorial gives PCL's pose with the drop-in on CUDA", "[gpu][data][pcl]") {
  NDTCU_REQUIRE_GPU();
  check_tutorial(Backend::Cuda);
}
