#pragma once
/// \file
/// A drop-in for PCL's `pcl::NormalDistributionsTransform` (PCL 1.13, registration/ndt.h)
/// that runs ndtcu's Aligner: code written for PCL's NDT changes one include and one type.
///
///     #include <ndtcu/pcl/ndt.hpp>   // was <pcl/registration/ndt.h>
///     ndtcu::pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ> ndt;
///     ndt.setBackend(ndtcu::Backend::Cuda);  // optional: the default is the CPU reference
///
/// Header-only and only for code that has PCL: CMake's `find_package(ndtcu COMPONENTS pcl)`
/// gives the target `ndtcu::pcl` (ndtcu::ndtcu plus PCL's common and registration). The
/// library ndtcu::ndtcu itself never links PCL.
///
/// Semantics are PCL's (`pcl_preset()`: radius search, More-Thuente line search, PCL's
/// voxel covariance and stopping rule, the same defaults), and so are the numbers: on PCL's
/// NDT tutorial the pose equals PCL's to 1e-4 m / 1e-4 rad, with the same iteration count.
/// Where this class differs from PCL's:
///  - hasConverged() is PCL's: true when the loop ended by the epsilon rule *or* at the
///    iteration limit. It is false where PCL reports a zero step as converged although no
///    source point had a voxel (no correspondence, an empty source); getAlignResult() has
///    the reason and the strict `converged`.
///  - align() without a source or a target prints a PCL_ERROR naming the missing call and
///    returns (hasConverged() false, identity transform), as PCL does for a missing target;
///    PCL returns silently for a missing source.
///  - Settings PCL would take but ndtcu rejects (a step size <= 0, an epsilon above twice
///    the step size, max iterations < 1, threads above kMaxThreads) and a rotation epsilon
///    (setTransformationRotationEpsilon, which ndtcu's stopping rule does not have) make
///    align() throw ndtcu::Error naming the setting; Backend::Cuda without a CUDA build or
///    device throws ndtcu::CudaError there.
///  - Non-finite points are left out of both clouds (PCL's voxel grid skips them in the
///    target; in the source they find no voxel); the likelihood still divides by the
///    source's size, as PCL's does.
///  - The target's voxel map is built at the first align() after setInputTarget(),
///    setResolution() or setMinPointPerVoxel() changed it (PCL builds it in the setter, and
///    setResolution() rebuilds it only once a source is set), and kept until then.
///  - The start: PCL takes the guess's translation and Eigen's eulerAngles(0, 1, 2) of its
///    rotation (roll in [0, pi]) and iterates on those angles; so does the drop-in. PCL's
///    first evaluation, though, transforms the source by the guess matrix itself, the
///    drop-in's by the transform rebuilt from those angles (they differ by float rounding,
///    ~1e-7). With a guess PCL's rebuild reproduces (e.g. a yaw, as in its tutorial) the two
///    agree to 1e-6 m; from a guess it flips (a negative roll) PCL's own end moves by up to
///    its stopping tolerance between the two starts (4.8e-4 m seen in tests/pcl), and the
///    drop-in gives PCL's pose from the rebuilt start.
///  - With setIndices(), the indexed source points are aligned (PCL iterates over the whole
///    input while its output holds the indexed points).

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/text.hpp>
#include <ndtcu/voxel_map.hpp>

#include <pcl/common/transforms.h>
#include <pcl/console/print.h>
#include <pcl/memory.h>
#include <pcl/point_cloud.h>
#include <pcl/registration/registration.h>

#include <Eigen/Core>
#include <Eigen/Geometry>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>

namespace ndtcu {
namespace pcl {

// Inside this namespace `pcl::` names ndtcu::pcl, so PCL's names are spelled `::pcl::`,
// and messages call ::pcl::console::print, what PCL_ERROR and PCL_WARN expand to.

/// PCL's NormalDistributionsTransform interface over ndtcu::Aligner (float transforms, as
/// PCL's default Scalar). Not thread-safe: one align() at a time per object. Movable, not
/// copyable (it owns the aligner and its workers).
template <typename PointSource, typename PointTarget>
class NormalDistributionsTransform : public ::pcl::Registration<PointSource, PointTarget, float> {
  using Base = ::pcl::Registration<PointSource, PointTarget, float>;

 public:
  /// The source cloud type (pcl::PointCloud<PointSource>).
  using PointCloudSource = typename Base::PointCloudSource;
  /// The target cloud type (pcl::PointCloud<PointTarget>).
  using PointCloudTarget = typename Base::PointCloudTarget;
  /// A shared pointer to a const target cloud, as setInputTarget() takes it.
  using PointCloudTargetConstPtr = typename PointCloudTarget::ConstPtr;
  /// 4x4 float transform (PCL's Registration::Matrix4).
  using Matrix4 = typename Base::Matrix4;
  /// Affine float transform, as PCL's convertTransform() fills it.
  using Affine3 = Eigen::Transform<float, 3, Eigen::Affine>;
  /// Shared pointer, as PCL's NDT::Ptr.
  using Ptr = ::pcl::shared_ptr<NormalDistributionsTransform>;
  /// Shared pointer to const, as PCL's NDT::ConstPtr.
  using ConstPtr = ::pcl::shared_ptr<const NormalDistributionsTransform>;

  /// PCL's defaults: resolution 1.0, step size 0.1, outlier ratio 0.55, transformation
  /// epsilon 0.1, 35 iterations, 6 points per voxel; CPU backend, one thread per core.
  NormalDistributionsTransform() {
    reg_name_ = "ndtcu::pcl::NormalDistributionsTransform";
    // PCL's NDT constructor sets these two over Registration's defaults (ndt.hpp).
    transformation_epsilon_ = 0.1;
    max_iterations_ = 35;
  }

  /// Sets the target (map) cloud; its voxel map is built at the next align().
  void setInputTarget(const PointCloudTargetConstPtr& cloud) override {
    Base::setInputTarget(cloud);
    target_changed_ = true;
  }

  /// Voxel edge length (m), also the neighbour search radius; a change rebuilds the voxel
  /// map at the next align(). Must be > 0 (align() throws ndtcu::Error otherwise).
  void setResolution(float resolution) { resolution_ = resolution; }
  /// Voxel edge length (m).
  float getResolution() const { return resolution_; }

  /// Largest step length |dp| of the More-Thuente line search (PCL's "maximum step length").
  void setStepSize(double step_size) { step_size_ = step_size; }
  /// Largest step length.
  double getStepSize() const { return step_size_; }

  /// Outlier ratio of the score's mixture (Magnusson 2009, eq. 6.7), in (0, 1). PCL's spelling.
  void setOulierRatio(double outlier_ratio) { outlier_ratio_ = outlier_ratio; }
  /// The same as setOulierRatio().
  void setOutlierRatio(double outlier_ratio) { outlier_ratio_ = outlier_ratio; }
  /// Outlier ratio. PCL's spelling.
  double getOulierRatio() const { return outlier_ratio_; }
  /// The same as getOulierRatio().
  double getOutlierRatio() const { return outlier_ratio_; }

  /// Voxels with fewer points are not used; below 3 it is set to 3 with a warning, as PCL's
  /// VoxelGridCovariance does (a covariance needs 3 points).
  void setMinPointPerVoxel(unsigned int min_points_per_voxel) {
    if (min_points_per_voxel > 2) {
      min_points_per_voxel_ = static_cast<int>(min_points_per_voxel);
    } else {
      ::pcl::console::print(::pcl::console::L_WARN,
                            "[%s::setMinPointPerVoxel] Covariance calculation requires at least 3 points, "
                            "setting Min Point per Voxel to 3\n",
                            getClassName().c_str());
      min_points_per_voxel_ = 3;
    }
  }

  /// Which ndtcu backend aligns: Backend::Cpu (the default: PCL's numbers), Backend::Cuda
  /// (align() throws ndtcu::CudaError without a CUDA build or device) or Backend::Auto
  /// (CUDA when present). The voxel map is kept across a change.
  void setBackend(Backend backend) { backend_ = backend; }
  /// The backend asked for (Auto is resolved at align(): see getAlignResult().backend).
  Backend getBackend() const { return backend_; }

  /// CPU worker threads (0, the default: one per hardware thread). The result does not
  /// depend on it: sums are reduced in a fixed order.
  void setNumberOfThreads(unsigned int threads = 0) { threads_ = threads; }
  /// CPU worker threads (0: one per hardware thread).
  unsigned int getNumberOfThreads() const { return threads_; }

  /// PCL's "transformation likelihood": the NDT score at the final pose divided by the
  /// source cloud's size (non-finite points included in the count, as PCL does).
  double getTransformationLikelihood() const { return trans_likelihood_; }
  /// The same as getTransformationLikelihood() (PCL's older name).
  double getTransformationProbability() const { return trans_likelihood_; }
  /// Newton iterations of the last align().
  int getFinalNumIteration() const { return nr_iterations_; }

  /// Everything ndtcu's aligner returned for the last align(): stop reason, strict
  /// `converged`, score, TP, NVTL, Hessian, per-iteration trace, timings, backend.
  const AlignResult& getAlignResult() const { return result_; }

  /// Aligns the source to the target from the identity; `output` receives the source
  /// transformed by getFinalTransformation(). Without a source or target: PCL_ERROR naming
  /// the missing call, hasConverged() false, `output` untouched.
  void align(PointCloudSource& output) { align(output, Matrix4::Identity()); }
  /// Aligns the source to the target from `guess` (source to target).
  void align(PointCloudSource& output, const Matrix4& guess) {
    if (!input_ || !target_) {
      reset_result(input_ ? StopReason::NoVoxels : StopReason::EmptySource);
      ::pcl::console::print(::pcl::console::L_ERROR, "[%s::align] No input %s cloud: call %s() before align().\n",
                            getClassName().c_str(), input_ ? "target" : "source",
                            input_ ? "setInputTarget" : "setInputSource");
      return;
    }
    Base::align(output, guess);
  }

  /// PCL's transform of a pose [x y z roll pitch yaw]: Translation * Rx * Ry * Rz.
  static void convertTransform(const Eigen::Matrix<double, 6, 1>& x, Affine3& trans) {
    trans.matrix() = pose_to_matrix(x).cast<float>();
  }
  /// The same as a 4x4 matrix.
  static void convertTransform(const Eigen::Matrix<double, 6, 1>& x, Matrix4& trans) {
    trans = pose_to_matrix(x).cast<float>();
  }

 protected:
  using Base::converged_;
  using Base::final_transformation_;
  using Base::getClassName;
  using Base::input_;
  using Base::max_iterations_;
  using Base::nr_iterations_;
  using Base::previous_transformation_;
  using Base::reg_name_;
  using Base::target_;
  using Base::transformation_;
  using Base::transformation_epsilon_;
  using Base::transformation_rotation_epsilon_;

  /// Called by Registration::align() with `output` holding the (indexed) source points.
  void computeTransformation(PointCloudSource& output, const Matrix4& guess) override {
    reset_result(StopReason::MaxIterations);
    const AlignSettings settings = current_settings();
    prepare(settings, current_execution());
    if (aligner_->target()->empty()) {
      // PCL's message and behaviour (ndt.hpp, computeTransformation): nothing is moved.
      result_.reason = StopReason::NoVoxels;
      ::pcl::console::print(::pcl::console::L_ERROR,
                            "[%s::computeTransformation] Voxel grid is not searchable! (no voxel of %d or more "
                            "points at resolution %g)\n",
                            getClassName().c_str(), min_points_per_voxel_, static_cast<double>(resolution_));
      return;
    }
    PointCloud source;
    source.points.reserve(output.size());
    for (const auto& p : output.points) {
      if (std::isfinite(p.x) && std::isfinite(p.y) && std::isfinite(p.z)) source.points.emplace_back(p.x, p.y, p.z);
    }
    // The start pose as PCL takes it from the guess (ndt.hpp, computeTransformation):
    // translation and Eigen's eulerAngles(0, 1, 2) of the float transform's rotation, which
    // puts roll in [0, pi]. The Newton iterations run on these angles, so the same
    // parametrization gives the same path as PCL's.
    Affine3 start;
    start.matrix() = guess;
    const Eigen::Vector3f translation = start.translation();
    const Eigen::Vector3f angles = start.rotation().eulerAngles(0, 1, 2);
    Pose6 pose;
    pose << translation.template cast<double>(), angles.template cast<double>();

    result_ = aligner_->align_from_pose(source, pose);

    nr_iterations_ = result_.iterations;
    // PCL's converged_: set when the loop ends by the epsilon rule or at the iteration
    // limit, and for an exact zero step (StopReason::Converged here).
    converged_ = result_.reason == StopReason::Converged || result_.reason == StopReason::MaxIterations;
    final_transformation_ = result_.transform.template cast<float>();
    // PCL's transformation_ is the last increment, previous_transformation_ the one before.
    const auto& trace = result_.trace;
    const std::size_t n = trace.size();
    if (n >= 1) convertTransform(trace[n - 1].pose - (n >= 2 ? trace[n - 2].pose : pose), transformation_);
    if (n >= 2) convertTransform(trace[n - 2].pose - (n >= 3 ? trace[n - 3].pose : pose), previous_transformation_);
    trans_likelihood_ = result_.score / static_cast<double>(input_->size());
    if (!converged_) {
      ::pcl::console::print(::pcl::console::L_WARN,
                            "[%s::computeTransformation] Stopped without converging: %s after %d iterations\n",
                            getClassName().c_str(), to_string(result_.reason), result_.iterations);
    }
    ::pcl::transformPointCloud(output, output, final_transformation_);
  }

 private:
  void reset_result(StopReason reason) {
    nr_iterations_ = 0;
    converged_ = false;
    trans_likelihood_ = 0.0;
    final_transformation_ = transformation_ = previous_transformation_ = Matrix4::Identity();
    result_ = AlignResult{};
    result_.reason = reason;
  }

  // PCL's preset with this object's settings; throws ndtcu::Error naming the PCL setter of
  // a value ndtcu does not take.
  AlignSettings current_settings() const {
    if (transformation_rotation_epsilon_ > 0.0) {
      throw Error(getClassName() + "::align: setTransformationRotationEpsilon(" +
                  ndtcu::number_text(transformation_rotation_epsilon_) +
                  ") is not supported (ndtcu stops on the translation epsilon alone, as PCL does with the "
                  "default 0); set it to 0");
    }
    AlignSettings s = pcl_preset();
    s.resolution = static_cast<double>(resolution_);
    s.step_size = step_size_;
    s.epsilon = transformation_epsilon_;
    s.max_iterations = max_iterations_;
    s.outlier_ratio = outlier_ratio_;
    s.min_points_per_voxel = min_points_per_voxel_;
    try {
      validate(s);
    } catch (const Error& e) {
      throw_invalid(e);
    }
    return s;
  }

  // How this object's aligner runs: setBackend, setNumberOfThreads.
  ExecutionOptions current_execution() const {
    ExecutionOptions e;
    e.threads = static_cast<int>(std::min(threads_, static_cast<unsigned int>(INT_MAX)));
    e.backend = backend_;
    try {
      validate(e);
    } catch (const Error& error) {
      throw_invalid(error);
    }
    return e;
  }

  // An invalid setting, named with the PCL setters that set one.
  [[noreturn]] void throw_invalid(const Error& e) const {
    throw Error(getClassName() + "::align: " + e.what() +
                " (setResolution, setStepSize, setTransformationEpsilon, setMaximumIterations, "
                "setOulierRatio, setNumberOfThreads)");
  }

  static bool same_settings(const AlignSettings& a, const AlignSettings& b) {
    return a.resolution == b.resolution && a.step_size == b.step_size && a.epsilon == b.epsilon &&
           a.max_iterations == b.max_iterations && a.outlier_ratio == b.outlier_ratio &&
           a.min_points_per_voxel == b.min_points_per_voxel;
  }

  static bool same_execution(const ExecutionOptions& a, const ExecutionOptions& b) {
    return a.threads == b.threads && a.backend == b.backend;
  }

  // An aligner with `s`, run as `e`, and the target's voxel map: the aligner is made again
  // only when a setting changed, the map only when the target, resolution or points per
  // voxel did.
  void prepare(const AlignSettings& s, const ExecutionOptions& e) {
    if (!aligner_ || !same_settings(aligner_->settings(), s) || !same_execution(aligner_->execution(), e)) {
      std::shared_ptr<const VoxelMap> map = aligner_ ? aligner_->target() : nullptr;
      auto next = std::make_unique<Aligner>(s, e);
      const VoxelMapOptions wanted = voxel_map_options(s, e);
      if (map && !target_changed_ && map->options().resolution == wanted.resolution &&
          map->options().min_points == wanted.min_points) {
        next->set_target(std::move(map));
      }
      aligner_ = std::move(next);
    }
    if (target_changed_ || !aligner_->target()) {
      PointCloud target;
      target.points.reserve(target_->size());
      for (const auto& p : target_->points) {
        if (std::isfinite(p.x) && std::isfinite(p.y) && std::isfinite(p.z)) target.points.emplace_back(p.x, p.y, p.z);
      }
      aligner_->set_target(target);
      target_changed_ = false;
    }
  }

  float resolution_ = 1.0f;       // PCL's default
  double step_size_ = 0.1;        // PCL's default
  double outlier_ratio_ = 0.55;   // PCL's default
  int min_points_per_voxel_ = 6;  // PCL's VoxelGridCovariance default
  Backend backend_ = Backend::Cpu;
  unsigned int threads_ = 0;
  double trans_likelihood_ = 0.0;
  AlignResult result_;
  std::unique_ptr<Aligner> aligner_;
  bool target_changed_ = true;
};

}  // namespace pcl
}  // namespace ndtcu
