// `opforge op OP [--entry E] [--backend B] [--dtype D] [--param NAME=VALUE ...] [--threads N]
//  --in NAME=FILE.npy ... --out DIR [--force]`: one call of an op on the user's own tensors, through
// the loader (prebuilt or JIT module, any backend), with every out/inout argument written as
// DIR/NAME.npy (list elements DIR/NAME.K.npy). `opforge op OP --describe` prints the contract.
//
// Exit status: 0 done; 2 the call was refused before it ran (bad arguments, files, params, an
// existing output without --force, backend not available, module says unsupported); 1 the module
// failed to load or run, or the outputs could not be written. Errors are one line, and nothing is
// written to DIR unless the whole call succeeded (op/out_dir.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "npy.h"
#include "op/args.h"
#include "op/describe.h"
#include "op/out_dir.h"
#include "op/params.h"
#include "op/text.h"
#include "opforge/call.h"
#include "opforge/error.h"
#include "opforge/loader.h"

namespace opf::cli {
namespace {

struct Options {
  std::string op, entry, backend = "cpu", dtype, out;
  std::vector<std::string> ins, params;
  int threads = 0;
  bool force = false, describe = false;
};

// A failure after the call was accepted: exit 1 rather than 2.
struct RunFailed : Error {
  using Error::Error;
};

// Device memory for the call's tensors, freed on every path out.
class Buffers {
 public:
  explicit Buffers(Device& d) : dev_(d) {}
  ~Buffers() {
    for (void* p : ptrs_) dev_.free(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  void* upload(const std::vector<std::byte>& bytes) {
    void* p = dev_.alloc(std::max<size_t>(bytes.size(), 64));  // never a zero-byte allocation
    ptrs_.push_back(p);
    if (!bytes.empty()) dev_.to_device(p, bytes.data(), bytes.size());
    return p;
  }

 private:
  Device& dev_;
  std::vector<void*> ptrs_;
};

std::string output_name(const HostArg& h, size_t k) {
  return h.info->name + (h.info->list ? "." + std::to_string(k) : "") + ".npy";
}

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

int run_op(const Options& o) {
  const OpInfo* op = find_op(o.op);
  if (!op) {
    std::vector<std::string> names;
    for (const OpInfo& x : op_table()) names.push_back(x.name);
    throw Error("unknown op '" + o.op + "' (ops in this build: " + join(names) + ")");
  }
  if (o.describe) {
    std::fputs(describe_json(*op).c_str(), stdout);
    return 0;
  }
  if (o.out.empty()) throw Error("--out DIR is required (or --describe)");
  if (op->entries.empty()) throw Error("op '" + op->name + "' has no entries");
  const EntryInfo* entry = op->find_entry(o.entry.empty() ? op->entries.front().name : o.entry);
  if (!entry) {
    std::vector<std::string> names;
    for (const EntryInfo& e : op->entries) names.push_back(e.name);
    throw Error("op '" + op->name + "' has no entry '" + o.entry + "' (entries: " + join(names) + ")");
  }
  if (!op->has_backend(o.backend))
    throw Error("--backend " + o.backend + ": " + op->name + " is built for " + join(op->enabled_backends));
  Loader& loader = Loader::instance();
  if (const Availability a = loader.availability(o.backend); !a.ok)
    throw Error("backend " + o.backend + " is not available here: " + a.reason);
  if (o.threads < 0) throw Error("--threads " + std::to_string(o.threads) + ": must be >= 0 (0 = the default)");
  std::optional<DType> dtype;
  if (!o.dtype.empty() && !(dtype = dtype_from_name(o.dtype))) throw Error("--dtype " + o.dtype + " is not a dtype");
  const Params params = parse_params(*op, o.params);
  HostCall call = load_call(*op, *entry, o.ins, dtype);

  OutputDir out(o.out, o.force);
  for (const HostArg& h : call.args)
    if (h.info->role != Role::in)
      for (size_t k = 0; k < h.elems.size(); ++k) out.check_free(output_name(h, k), h.info->name);

  const opf_module_info* module = nullptr;
  Device* device = nullptr;
  try {  // a JIT compile or a GPU context can fail here: the machine's problem, not the input's
    module = loader.load(*op, o.backend).info;
    device = &loader.device(o.backend);
  } catch (const Error& e) {
    throw RunFailed(e.what());
  }
  Device& dev = *device;
  Buffers buffers(dev);
  std::vector<std::vector<void*>> ptrs(call.args.size());
  CallBuilder b(*op, entry->name);
  b.params(params).threads(o.threads);
  for (size_t i = 0; i < call.args.size(); ++i) {
    HostArg& h = call.args[i];
    if (h.info->list) b.empty_list(h.info->name);  // present even with no elements
    for (HostTensor& t : h.elems) {
      ptrs[i].push_back(buffers.upload(t.bytes));
      b.add(h.info->name, ptrs[i].back(), h.dtype, t.shape);
    }
  }
  dev.synchronize();
  if (const std::string why = b.supports(module); !why.empty()) throw Error("unsupported: " + why);

  std::vector<std::string> names;
  try {
    b.run(module);
    dev.synchronize();
    for (size_t i = 0; i < call.args.size(); ++i) {
      HostArg& h = call.args[i];
      if (h.info->role == Role::in) continue;
      for (size_t k = 0; k < h.elems.size(); ++k) {
        HostTensor& t = h.elems[k];
        if (!t.bytes.empty()) dev.to_host(t.bytes.data(), ptrs[i][k], t.bytes.size());
        names.push_back(output_name(h, k));
        try {
          npy::write(out.staged(names.back()), to_npy(h, t));
        } catch (const Error& e) {
          // the user knows DIR/NAME.npy, not the staging directory it is written in first
          std::string why = e.what();
          if (const std::string staged = out.staged(names.back()) + ": "; why.starts_with(staged))
            why = why.substr(staged.size());
          throw Error(out.target(names.back()) + ": not written, nothing in " + out.dir() + " changed: " + why);
        }
      }
    }
    out.commit(names);
  } catch (const Error& e) {
    throw RunFailed(e.what());
  }
  for (const HostArg& h : call.args)
    if (h.info->role != Role::in)
      for (size_t k = 0; k < h.elems.size(); ++k)
        std::printf("%s  %s%s %s\n", out.target(output_name(h, k)).c_str(), std::string(dtype_name(h.dtype)).c_str(),
                    h.dtype == DType::bf16 ? " (written as f32)" : "", shape_text(h.elems[k].shape).c_str());
  return 0;
}

}  // namespace

void add_op_command(CLI::App& app) {
  auto* sub = app.add_subcommand("op", "Run one op call on .npy inputs and write its outputs as .npy files");
  auto o = std::make_shared<Options>();
  sub->add_option("op", o->op, "op name (opforge ops lists them)")->required();
  sub->add_option("--entry", o->entry, "entry point (default: the op's first, e.g. forward)");
  sub->add_option("--backend", o->backend, "cpu (default), cuda or hip");
  sub->add_option(
      "--dtype", o->dtype,
      "storage dtype T (default: the first float input's; bf16 arguments are read and written as f32 .npy)");
  sub->add_option("--param", o->params,
                  "NAME=VALUE, repeatable: f64/i64 numbers, bool true|false|1|0, enum choice name")
      ->allow_extra_args(false);
  sub->add_option("--threads", o->threads, "CPU threads (0 = OPFORGE_NUM_THREADS / all cores)");
  sub->add_option("--in", o->ins,
                  "NAME=FILE.npy, repeatable; a list argument: once per element, in order (none = empty list); "
                  "an out argument: its shape only")
      ->allow_extra_args(false);
  sub->add_option("--out", o->out, "directory for DIR/NAME.npy of every out/inout argument (list: NAME.K.npy)");
  sub->add_flag("--force", o->force, "overwrite existing DIR/NAME.npy files");
  sub->add_flag("--describe", o->describe, "print the op's entries, arguments and params as JSON");
  on_run(sub, [o] {
    try {
      return run_op(*o);
    } catch (const RunFailed& e) {
      std::fprintf(stderr, "opforge op: %s\n", e.what());
      return 1;
    } catch (const Error& e) {
      std::fprintf(stderr, "opforge op: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {  // filesystem errors, bad_alloc: not the input's fault
      std::fprintf(stderr, "opforge op: %s\n", e.what());
      return 1;
    }
  });
}

}  // namespace opf::cli
