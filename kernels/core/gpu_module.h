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
//   int upload(void* dst, const void* src, size_t bytes, void* stream);  host -> device, ordered on
//                                                          stream; src may be reused on return
//   int make_current();                                    bind the device context to this thread
//   int unload(Module);
#pragma once

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/launch_abi.h"
#include "gpu/launcher.h"
#include "opforge/abi.h"
#include "opforge/dtype.h"
#include "opforge/error.h"
#include "core/gpu_lists.h"
#include "core/manifest_shapes.h"
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

inline std::string gpu_plan_name(const std::string& op, const std::string& entry) { return op + "_" + entry + "_plan"; }

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
    case OPF_EXTENT_TENSORS: return a.rows;  // list entries only: rows = tensors, cols = chunks
    case OPF_EXTENT_CHUNKS: return a.cols;
    default: return 1;
  }
}

// "" when the plan is usable, else why not.
inline std::string gpu_plan_problem(const opf_gpu_plan& p) {
  auto extent_ok = [](int e) { return e >= OPF_EXTENT_ONE && e <= OPF_EXTENT_CHUNKS; };
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

// A plan sizes a grid or its workspace by the list extents (meaningful in list entries only).
inline bool plan_uses_lists(const opf_gpu_plan& p) {
  auto of_lists = [](int e) { return e == OPF_EXTENT_TENSORS || e == OPF_EXTENT_CHUNKS; };
  bool uses = of_lists(p.workspace_extent);
  for (int k = 0; k < p.nstages && k < OPF_GPU_MAX_STAGES; ++k) uses = uses || of_lists(p.stage[k].grid_x_extent);
  return uses;
}

// Fills the kernel argument struct from an ABI call (gpu/launcher.h), the entry's `view` arguments
// allowed any strides, its lists left to GpuListTable; "" on success, else the problem.
inline std::string gpu_make_args(const OpInfo& op, const opf_call* c, opf_gpu_args& a) {
  unsigned views = 0, lists = 0;
  if (const EntryInfo* e = op.find_entry(c->entry ? c->entry : "")) {
    for (size_t i = 0; i < e->args.size() && i < 32; ++i)
      if (e->args[i].view) views |= 1u << i;
    lists = gpu_list_mask(*e);
  }
  return gpu::args_from_call(c, a, views, lists);
}

template <class Api>
class GpuModule {
 public:
  // Without a launcher: resolves every plan and every kernel the manifest promises (entries x
  // dtypes x stages), so a module that lacks one is rejected here rather than failing mid-run.
  // With the op's host launcher (gpu/launcher.h), run/supports are the launcher's, and kernels are
  // looked up when it asks for them.
  GpuModule(Api& api, typename Api::Module mod, const OpInfo& op, const char* backend, std::string isa,
            const std::string& path, const opf_gpu_launcher* launcher = nullptr)
      : api_(api),
        mod_(mod),
        op_(op.name),
        backend_(backend),
        isa_(std::move(isa)),
        info_op_(&op),
        launcher_(launcher) {
    info_ = opf_module_info{
        OPF_ABI_VERSION, op_.c_str(), backend_, isa_.c_str(), &GpuModule::run_thunk, &GpuModule::supports_thunk, this};
    if (launcher_) {
      ctx_ = opf_gpu_launch_ctx{this,
                                backend_,
                                isa_.c_str(),
                                &GpuModule::ctx_kernel,
                                &GpuModule::ctx_launch,
                                &GpuModule::ctx_workspace,
                                &GpuModule::ctx_error};
      return;
    }
    for (const auto& entry_info : op.entries) {
      const std::string& entry = entry_info.name;
      Entry e;
      const std::string pname = gpu_plan_name(op.name, entry);
      int rc = api_.read_global(&e.plan, sizeof e.plan, mod_, pname.c_str());
      if (rc != 0) reject(path, "no plan '" + pname + "' (" + (rc == -1 ? "size mismatch" : api_.error(rc)) + ")");
      if (std::string why = gpu_plan_problem(e.plan); !why.empty()) reject(path, "plan '" + pname + "': " + why);
      e.lists = gpu_list_mask(entry_info) != 0;
      if (e.lists && e.plan.chunk < 1) reject(path, "plan '" + pname + "' of a list entry has no chunk size");
      if (!e.lists && plan_uses_lists(e.plan))
        reject(path, "plan '" + pname + "' sizes by TENSORS/CHUNKS without lists");
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
    bool lists = false;  // a multi-tensor apply entry (gpu/launch_abi.h, "Lists")
    std::map<std::string, std::vector<typename Api::Function>> kernels;  // dtype -> stage kernels
  };

  [[noreturn]] void reject(const std::string& path, const std::string& why) {
    api_.unload(mod_);
    throw Error("module " + path + " rejected: " + why);
  }

  static int run_thunk(const opf_module_info* self, const opf_call* call, char* err, size_t len) {
    GpuModule* m = static_cast<GpuModule*>(self->impl);
    if (m->launcher_) {
      if (std::string why = m->check_for_launcher(call); !why.empty()) {
        std::snprintf(err, len, "%s", why.c_str());
        return 1;
      }
      std::lock_guard lock(m->mu_);  // the workspace is shared by this module's calls
      if (int rc = m->api_.make_current(); rc != 0) {
        std::snprintf(err, len, "%s", m->fail("cannot bind the device context", rc).c_str());
        return 1;
      }
      return m->launcher_->run(&m->ctx_, call, err, len) == 0 ? 0 : 1;
    }
    std::string why = m->run(call);
    if (why.empty()) return 0;
    std::snprintf(err, len, "%s", why.c_str());
    return 1;
  }

  static int supports_thunk(const opf_module_info* self, const opf_call* call, char* err, size_t len) {
    GpuModule* m = static_cast<GpuModule*>(self->impl);
    if (m->launcher_) {
      if (std::string why = m->check_for_launcher(call); !why.empty()) {
        std::snprintf(err, len, "%s", why.c_str());
        return 1;
      }
      return m->launcher_->supports ? (m->launcher_->supports(&m->ctx_, call, err, len) == 0 ? 0 : 1) : 0;
    }
    std::string why = m->check(call);
    if (why.empty()) return 0;
    std::snprintf(err, len, "%s", why.c_str());
    return 1;
  }

  // ---- the launcher's context (gpu/launcher.h); called with mu_ held, from run_thunk
  static int ctx_kernel(void* impl, const char* name, void** fn) {
    GpuModule* m = static_cast<GpuModule*>(impl);
    auto it = m->by_name_.find(name);
    if (it == m->by_name_.end()) {
      typename Api::Function f{};
      if (int rc = m->api_.get_function(&f, m->mod_, name); rc != 0) return rc;
      it = m->by_name_.emplace(name, f).first;
    }
    *fn = &it->second;  // std::map nodes stay put
    return 0;
  }
  static int ctx_launch(void* impl, void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream,
                        opf_gpu_args* args) {
    GpuModule* m = static_cast<GpuModule*>(impl);
    return m->api_.launch(*static_cast<typename Api::Function*>(fn), gx, gy, block, shared, stream, args);
  }
  static int ctx_workspace(void* impl, size_t bytes, void** ptr) {
    GpuModule* m = static_cast<GpuModule*>(impl);
    if (int rc = m->grow_workspace(bytes); rc != 0) return rc;
    *ptr = bytes ? m->workspace_ : nullptr;
    return 0;
  }
  static void ctx_error(void* impl, int status, char* buf, size_t len) {
    std::snprintf(buf, len, "%s", static_cast<GpuModule*>(impl)->api_.error(status).c_str());
  }

  // Ensures workspace_ holds at least `bytes`; 0 or the API's status.
  int grow_workspace(size_t bytes) {
    if (bytes <= workspace_bytes_) return 0;
    // Earlier calls may still read the old buffer on their stream.
    if (workspace_) {
      if (int rc = api_.synchronize(); rc != 0) return rc;
      api_.release(workspace_);
      workspace_ = nullptr;
      workspace_bytes_ = 0;
    }
    if (int rc = api_.alloc(&workspace_, bytes); rc != 0) return rc;
    workspace_bytes_ = bytes;
    return 0;
  }

  // An op's own launcher gets calls checked like the generic launcher's (arguments, dtype rules,
  // symbolic shapes, the op's limits; lists too): it adds only what the manifest cannot say.
  std::string check_for_launcher(const opf_call* c) const {
    const EntryInfo* e = info_op_->find_entry(c->entry ? c->entry : "");
    if (!e) return op_ + "/" + backend_ + ": no entry '" + (c->entry ? c->entry : "(null)") + "'";
    opf_gpu_args a;
    if (std::string why = gpu_make_args(*info_op_, c, a); !why.empty()) return op_ + "/" + backend_ + ": " + why;
    if (std::string why = check_tensors(c); !why.empty()) return op_ + "/" + backend_ + " " + c->entry + ": " + why;
    if (gpu_list_mask(*e)) {
      // The launcher cuts its lists itself: check them with one chunk per tensor (chunk 1 would
      // build a table entry per element).
      GpuListTable table;
      if (std::string why = table.build(*e, c, storage_dtype(c), std::numeric_limits<long long>::max()); !why.empty())
        return op_ + "/" + backend_ + " " + c->entry + ": " + why;
    }
    return "";
  }

  // Everything run() checks before launching: "" when the call is well-formed for this module.
  // A list entry's chunk table is built on the way; `table` (if given) keeps it for run().
  std::string check(const opf_call* c, GpuListTable* table = nullptr) const {
    auto it = entries_.find(c->entry ? c->entry : "");
    if (it == entries_.end()) return op_ + "/" + backend_ + ": no entry '" + (c->entry ? c->entry : "(null)") + "'";
    opf_gpu_args a;
    if (std::string why = gpu_make_args(*info_op_, c, a); !why.empty()) return op_ + "/" + backend_ + ": " + why;
    const std::string dtype(dtype_name(storage_dtype(c)));
    if (!it->second.kernels.count(dtype)) return op_ + "/" + backend_ + ": no kernels for dtype " + dtype;
    if (std::string why = check_tensors(c); !why.empty()) return op_ + "/" + backend_ + " " + c->entry + ": " + why;
    if (it->second.lists) {
      GpuListTable local;
      GpuListTable& t = table ? *table : local;
      if (std::string why = t.build(*info_op_->find_entry(c->entry), c, storage_dtype(c), it->second.plan.chunk);
          !why.empty())
        return op_ + "/" + backend_ + " " + c->entry + ": " + why;
    }
    return "";
  }

  std::string run(const opf_call* c) {
    GpuListTable table;  // a list entry's, built by check()
    if (std::string why = check(c, &table); !why.empty()) return why;
    auto it = entries_.find(c->entry);
    if (it == entries_.end()) return op_ + "/" + backend_ + ": no entry '" + (c->entry ? c->entry : "(null)") + "'";
    opf_gpu_args a;
    gpu_make_args(*info_op_, c, a);
    const std::string dtype(dtype_name(storage_dtype(c)));
    auto k = it->second.kernels.find(dtype);
    const opf_gpu_plan& plan = it->second.plan;

    if (it->second.lists) {
      a.rows = table.ntensors();
      a.cols = table.nchunks();
    }

    std::lock_guard lock(mu_);  // the workspace is shared by this module's calls
    if (int rc = api_.make_current(); rc != 0) return fail("cannot bind the device context", rc);
    // List entries: the chunk table first, the plan's workspace after it.
    const size_t table_bytes = it->second.lists ? table.bytes() : 0;
    const size_t ws = size_t(plan.workspace_mult) * size_t(gpu_extent(a, plan.workspace_extent));
    if (int rc = grow_workspace(table_bytes + ws); rc != 0) return fail("workspace allocation", rc);
    a.workspace = ws ? static_cast<char*>(workspace_) + table_bytes : nullptr;
    if (it->second.lists) {
      const std::vector<unsigned char> image = table.image(workspace_);
      if (int rc = api_.upload(workspace_, image.data(), image.size(), c->stream); rc != 0)
        return fail("upload of the list table", rc);
      a.lists = static_cast<const opf_gpu_lists*>(workspace_);
    }
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

  // The call's storage dtype T, which names its kernels (<op>_<entry>_<T>): the dtype of the first
  // argument whose manifest dtype is T (an entry may start with a per-row f32 gradient or labels).
  DType storage_dtype(const opf_call* c) const {
    // (A list may be empty; a call whose storage lists all are runs the op's first dtype's kernels.)
    if (const EntryInfo* e = info_op_->find_entry(c->entry ? c->entry : ""))
      for (size_t i = 0; i < e->args.size() && int(i) < c->nargs; ++i)
        if (e->args[i].rule == DTypeRule::storage && c->args[i].count > 0 && c->args[i].tensors)
          return DType(c->args[i].tensors[0].dtype);
    if (info_op_->find_entry(c->entry ? c->entry : "") && !info_op_->dtypes.empty())
      if (const auto d = dtype_from_name(info_op_->dtypes.front())) return *d;
    return DType(c->args[0].tensors[0].dtype);
  }

  // A kernel reads its pointers blindly: a missing tensor, a wrong dtype or sizes that disagree
  // would fault on the device, so the call is checked against the op's argument list first: each
  // dtype by its manifest rule, every shape against the manifest's symbolic shapes with one binding
  // for all arguments (core/manifest_shapes.h), then the op's own limits.
  std::string check_tensors(const opf_call* c) const {
    const EntryInfo* e = info_op_->find_entry(c->entry ? c->entry : "");
    if (!e) return "no entry '" + std::string(c->entry ? c->entry : "(null)") + "'";
    if (e->args.size() != size_t(c->nargs))
      return "expects " + std::to_string(e->args.size()) + " tensors, got " + std::to_string(c->nargs);
    for (int i = 0; i < c->nargs; ++i)
      if (!e->args[size_t(i)].list && !c->args[i].tensors[0].data)
        return "tensor " + std::to_string(i) + " has no data";
    const DType t = storage_dtype(c);
    ShapeBinder shapes;
    for (size_t i = 0; i < e->args.size(); ++i) {
      if (e->args[i].list) continue;  // GpuListTable checks lists
      const opf_tensor& x = c->args[i].tensors[0];
      const DType want = e->args[i].dtype_for(t);
      if (x.dtype != int32_t(want)) return "tensor '" + e->args[i].name + "' must be " + std::string(dtype_name(want));
      try {
        shapes.bind(e->args[i], Shape(x.shape, x.shape + x.ndim));
      } catch (const std::exception& err) {
        return err.what();
      }
    }
    // The op's own limits (e.g. causal_softmax's sq == sk) where argument 0 is a storage tensor of
    // the op's case rank, the convention of most entries; elsewhere the binding above stands alone.
    if (e->args.front().list) return "";
    const opf_tensor& t0 = c->args[0].tensors[0];
    if (!info_op_->spec || !info_op_->spec->describe || e->args.front().rule != DTypeRule::storage ||
        info_op_->cases.empty() || size_t(t0.ndim) != info_op_->cases.front().size())
      return "";
    try {
      return describe_case(*info_op_, c->entry, t, Shape(t0.shape, t0.shape + t0.ndim), info_op_->default_params())
          .unsupported;
    } catch (const std::exception&) {
      return "";  // argument 0's shape is not a case shape of this op
    }
  }

  std::string fail(const std::string& what, int rc) {
    return op_ + "/" + backend_ + ": " + what + " failed: " + api_.error(rc);
  }

  Api& api_;
  typename Api::Module mod_;
  std::string op_;
  const char* backend_;
  std::string isa_;
  const OpInfo* info_op_;
  const opf_gpu_launcher* launcher_;
  opf_gpu_launch_ctx ctx_{};
  std::map<std::string, typename Api::Function> by_name_;  // kernels the launcher asked for
  std::map<std::string, Entry> entries_;
  opf_module_info info_{};
  std::mutex mu_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace opf::detail
