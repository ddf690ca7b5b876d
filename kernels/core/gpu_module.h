// Internal: the generic GPU module shared by the CUDA and HIP backends. A GPU module is a code
// object (cubin/fatbin/hsaco) plus this host-side table; run() launches kernels by name following
// the plans the code object carries (kernels/gpu/launch_abi.h), so no op has host code.
//
// Api is a small adapter over one driver API (cuda_backend.cpp / hip_backend.cpp):
//   using Module, Function;
//   std::string error(int rc) const;                       one-line text of a status
//   int get_function(Function*, Module, const char* name);
//   int read_global(void* dst, size_t bytes, Module, const char* name);  0 = ok, -1 = size mismatch
//   int launch(Function, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream,
//              opf_gpu_args* args);
//   int alloc(void** p, size_t bytes); int release(void* p); int synchronize();
//   int make_current();                                    bind the device context to this thread
//   int unload(Module);
#pragma once

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/launch_abi.h"
#include "opforge/abi.h"
#include "opforge/dtype.h"
#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::detail {

inline std::string read_binary_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_binary_file(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(n));
  if (!out.flush()) throw Error("cannot write " + path);
}

inline std::string gpu_plan_name(const std::string& op, const std::string& entry) {
  return op + "_" + entry + "_plan";
}

inline std::string gpu_kernel_name(const std::string& op, const std::string& entry, const std::string& dtype,
                                   int stage) {
  std::string n = op + "_" + entry + "_" + dtype;
  if (stage > 0) n += "_s" + std::to_string(stage);
  return n;
}

inline long long gpu_extent(const opf_gpu_args& a, int which) {
  switch (which) {
    case OPF_EXTENT_ROWS: return a.rows;
    case OPF_EXTENT_COLS: return a.cols;
    default: return 1;
  }
}

// "" when the plan is usable, else why not.
inline std::string gpu_plan_problem(const opf_gpu_plan& p) {
  auto extent_ok = [](int e) { return e == OPF_EXTENT_ONE || e == OPF_EXTENT_ROWS || e == OPF_EXTENT_COLS; };
  if (p.nstages < 1 || p.nstages > OPF_GPU_MAX_STAGES) return "nstages " + std::to_string(p.nstages) + " out of range";
  if (!extent_ok(p.workspace_extent) || p.workspace_mult < 0) return "bad workspace rule";
  for (int k = 0; k < p.nstages; ++k) {
    const opf_gpu_stage& s = p.stage[k];
    if (!extent_ok(s.grid_x_extent) || s.grid_x_div < 1 || s.grid_y < 1 || s.block < 1 || s.block > 1024 ||
        s.shared_bytes < 0)
      return "stage " + std::to_string(k) + " has an invalid grid/block rule";
  }
  return "";
}

// Fills the kernel argument struct from an ABI call; "" on success, else the problem. The generic
// launcher passes plain dense tensors; list arguments need an op's own launcher.
inline std::string gpu_make_args(const opf_call* c, opf_gpu_args& a) {
  a = opf_gpu_args{};
  if (c->nargs < 1 || c->nargs > OPF_GPU_MAX_ARGS || !c->args)
    return "GPU modules take 1.." + std::to_string(OPF_GPU_MAX_ARGS) + " arguments, got " + std::to_string(c->nargs);
  if (c->nparams < 0 || c->nparams > OPF_GPU_MAX_PARAMS || (c->nparams > 0 && !c->params))
    return "GPU modules take at most " + std::to_string(OPF_GPU_MAX_PARAMS) + " params, got " + std::to_string(c->nparams);
  for (int i = 0; i < c->nargs; ++i) {
    const opf_arg& arg = c->args[i];
    if (arg.count != 1 || !arg.tensors)
      return "argument " + std::to_string(i) + " must be one tensor (the generic GPU launcher takes no lists), got " +
             std::to_string(arg.count);
    const opf_tensor& t = arg.tensors[0];
    if (t.ndim < 0 || t.ndim > OPF_GPU_MAX_DIMS) return "argument " + std::to_string(i) + " has " + std::to_string(t.ndim) + " dims";
    long long expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] > 1 && t.strides[d] != expect)
        return "argument " + std::to_string(i) + " is not contiguous (stride " + std::to_string(t.strides[d]) + " in dim " +
               std::to_string(d) + ")";
      expect *= t.shape[d];
    }
    a.ptr[i] = t.data;
  }
  for (int i = 0; i < c->nparams; ++i)
    a.param[i] = c->params[i].type == OPF_PARAM_F64 ? c->params[i].f64 : double(c->params[i].i64);
  const opf_tensor& t0 = c->args[0].tensors[0];
  if (t0.ndim < 1) return "first tensor has " + std::to_string(t0.ndim) + " dims";
  a.ndim = t0.ndim;
  a.nargs = c->nargs;
  a.rows = 1;
  for (int d = 0; d < t0.ndim; ++d) {
    a.shape[d] = t0.shape[d];
    if (d + 1 < t0.ndim) a.rows *= t0.shape[d];
  }
  a.cols = t0.shape[t0.ndim - 1];
  return "";
}

template <class Api>
class GpuModule {
 public:
  // Resolves every plan and every kernel the manifest promises (entries x dtypes x stages), so a
  // module that lacks one is rejected here rather than failing mid-run.
  GpuModule(Api& api, typename Api::Module mod, const OpInfo& op, const char* backend, std::string isa,
            const std::string& path)
      : api_(api), mod_(mod), op_(op.name), backend_(backend), isa_(std::move(isa)), info_op_(&op) {
    for (const auto& entry_info : op.entries) {
      const std::string& entry = entry_info.name;
      Entry e;
      const std::string pname = gpu_plan_name(op.name, entry);
      int rc = api_.read_global(&e.plan, sizeof e.plan, mod_, pname.c_str());
      if (rc != 0) reject(path, "no plan '" + pname + "' (" + (rc == -1 ? "size mismatch" : api_.error(rc)) + ")");
      if (std::string why = gpu_plan_problem(e.plan); !why.empty()) reject(path, "plan '" + pname + "': " + why);
      for (const auto& dtype : op.dtypes) {
        auto& fns = e.kernels[dtype];
        for (int k = 0; k < e.plan.nstages; ++k) {
          const std::string kname = gpu_kernel_name(op.name, entry, dtype, k);
          typename Api::Function f{};
          rc = api_.get_function(&f, mod_, kname.c_str());
          if (rc != 0) reject(path, "no kernel '" + kname + "' (" + api_.error(rc) + ")");
          fns.push_back(f);
        }
      }
      entries_[entry] = std::move(e);
    }
    info_ = opf_module_info{OPF_ABI_VERSION, op_.c_str(), backend_, isa_.c_str(), &GpuModule::run_thunk,
                            &GpuModule::supports_thunk, this};
  }

  // Modules live until the process ends (callers hold info pointers), so this only runs during
  // static destruction, when the driver may already be torn down (HIP crashes on calls made
  // then): the code object and workspace are left to the OS on purpose.
  ~GpuModule() = default;
  GpuModule(const GpuModule&) = delete;
  GpuModule& operator=(const GpuModule&) = delete;

  const opf_module_info* info() const { return &info_; }

 private:
  struct Entry {
    opf_gpu_plan plan{};
    std::map<std::string, std::vector<typename Api::Function>> kernels;  // dtype -> stage kernels
  };

  [[noreturn]] void reject(const std::string& path, const std::string& why) {
    api_.unload(mod_);
    throw Error("module " + path + " rejected: " + why);
  }

  static int run_thunk(const opf_module_info* self, const opf_call* call, char* err, size_t len) {
    std::string why = static_cast<GpuModule*>(self->impl)->run(call);
    if (why.empty()) return 0;
    std::snprintf(err, len, "%s", why.c_str());
    return 1;
  }

  static int supports_thunk(const opf_module_info* self, const opf_call* call, char* err, size_t len) {
    std::string why = static_cast<GpuModule*>(self->impl)->check(call);
    if (why.empty()) return 0;
    std::snprintf(err, len, "%s", why.c_str());
    return 1;
  }

  // Everything run() checks before launching: "" when the call is well-formed for this module.
  std::string check(const opf_call* c) const {
    auto it = entries_.find(c->entry ? c->entry : "");
    if (it == entries_.end()) return op_ + "/" + backend_ + ": no entry '" + (c->entry ? c->entry : "(null)") + "'";
    opf_gpu_args a;
    if (std::string why = gpu_make_args(c, a); !why.empty()) return op_ + "/" + backend_ + ": " + why;
    const std::string dtype(dtype_name(DType(c->args[0].tensors[0].dtype)));
    if (!it->second.kernels.count(dtype)) return op_ + "/" + backend_ + ": no kernels for dtype " + dtype;
    if (std::string why = check_tensors(c); !why.empty()) return op_ + "/" + backend_ + " " + c->entry + ": " + why;
    return "";
  }

  std::string run(const opf_call* c) {
    if (std::string why = check(c); !why.empty()) return why;
    auto it = entries_.find(c->entry);
    if (it == entries_.end()) return op_ + "/" + backend_ + ": no entry '" + (c->entry ? c->entry : "(null)") + "'";
    opf_gpu_args a;
    gpu_make_args(c, a);
    const std::string dtype(dtype_name(DType(c->args[0].tensors[0].dtype)));
    auto k = it->second.kernels.find(dtype);
    const opf_gpu_plan& plan = it->second.plan;

    std::lock_guard lock(mu_);  // the workspace is shared by this module's calls
    if (int rc = api_.make_current(); rc != 0) return fail("cannot bind the device context", rc);
    const size_t ws = size_t(plan.workspace_mult) * size_t(gpu_extent(a, plan.workspace_extent));
    if (ws > workspace_bytes_) {
      // Earlier calls may still read the old buffer on their stream.
      if (workspace_) {
        if (int rc = api_.synchronize(); rc != 0) return fail("synchronize", rc);
        api_.release(workspace_);
        workspace_ = nullptr;
        workspace_bytes_ = 0;
      }
      if (int rc = api_.alloc(&workspace_, ws); rc != 0) return fail("workspace allocation", rc);
      workspace_bytes_ = ws;
    }
    a.workspace = ws ? workspace_ : nullptr;
    for (int s = 0; s < plan.nstages; ++s) {
      const opf_gpu_stage& st = plan.stage[s];
      const long long gx = (gpu_extent(a, st.grid_x_extent) + st.grid_x_div - 1) / st.grid_x_div;
      if (gx <= 0) continue;
      if (gx > 0x7fffffffLL) return op_ + "/" + backend_ + ": grid too large (" + std::to_string(gx) + " blocks)";
      if (int rc = api_.launch(k->second[s], unsigned(gx), unsigned(st.grid_y), unsigned(st.block),
                               unsigned(st.shared_bytes), c->stream, &a);
          rc != 0)
        return fail("launch of " + gpu_kernel_name(op_, c->entry, dtype, s), rc);
    }
    return "";
  }

  // A kernel reads its pointers blindly: a missing tensor or a wrong dtype would fault on the
  // device, so the call is checked against the op's own argument list (ref.cpp) first.
  std::string check_tensors(const opf_call* c) const {
    for (int i = 0; i < c->nargs; ++i)
      if (!c->args[i].tensors[0].data) return "tensor " + std::to_string(i) + " has no data";
    if (!info_op_->spec || !info_op_->spec->describe) return "";
    const opf_tensor& t0 = c->args[0].tensors[0];
    const Shape shape(t0.shape, t0.shape + t0.ndim);
    CaseDesc d;
    try {
      d = describe_case(*info_op_, c->entry, DType(t0.dtype), shape, info_op_->default_params());
    } catch (const std::exception& e) {
      return e.what();
    }
    if (!d.unsupported.empty()) return d.unsupported;
    if (d.args.size() != size_t(c->nargs))
      return "expects " + std::to_string(d.args.size()) + " tensors, got " + std::to_string(c->nargs);
    for (size_t i = 0; i < d.args.size(); ++i) {
      const opf_tensor& t = c->args[i].tensors[0];
      if (t.dtype != int32_t(d.args[i].dtype))
        return "tensor '" + d.args[i].name + "' must be " + std::string(dtype_name(d.args[i].dtype));
      if (Shape(t.shape, t.shape + t.ndim) != d.args[i].shape)
        return "tensor '" + d.args[i].name + "' has the wrong shape for this call";
    }
    return "";
  }

  std::string fail(const std::string& what, int rc) { return op_ + "/" + backend_ + ": " + what + " failed: " + api_.error(rc); }

  Api& api_;
  typename Api::Module mod_;
  std::string op_;
  const char* backend_;
  std::string isa_;
  const OpInfo* info_op_;
  std::map<std::string, Entry> entries_;
  opf_module_info info_{};
  std::mutex mu_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace opf::detail
