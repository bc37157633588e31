#include "bench/cli.h"

#include <iostream>

#include "core/cuda_devices.h"
#include "core/errors.h"
#include "core/strings.h"
#include "models/model_registry.h"

namespace zb {

namespace po = boost::program_options;

void add_training_flags(po::options_description& flags, TrainingFlags& v) {
  // clang-format off
  flags.add_options()
    ("model", po::value(&v.model)->default_value(v.model),
     "model name (gpt2, gpt2-medium, gpt2-large, gpt2-xl, facebook/opt-1.3b, meta-llama/Llama-2-7b-hf, "
     "meta-llama/Llama-2-13b-hf, meta-llama/Llama-2-70b-hf, meta-llama/Llama-3.2-1B, gpt2-tiny, llama-tiny), "
     "or a Hugging Face config.json or a folder holding one")
    ("batch-size", po::value(&v.batch_size)->default_value(v.batch_size), "samples per micro-batch (per GPU)")
    ("seq-length", po::value(&v.seq_length)->default_value(v.seq_length, "min(512, model maximum)"),
     "tokens per sample")
    ("num-steps", po::value(&v.num_steps)->default_value(v.num_steps), "optimizer steps")
    ("grad-accum", po::value(&v.grad_accum)->default_value(v.grad_accum), "micro-batches per optimizer step")
    ("lr", po::value(&v.lr)->default_value(v.lr), "learning rate (constant)")
    ("optimizer", po::value(&v.optimizer)->default_value(v.optimizer), "adamw, adam or sgd")
    ("weight-decay", po::value(&v.weight_decay)->default_value(v.weight_decay, "0.01 for adamw, 0 otherwise"),
     "weight decay (decoupled for adamw, L2 for adam and sgd)")
    ("momentum", po::value(&v.momentum)->default_value(v.momentum), "SGD momentum")
    ("grad-clip", po::value(&v.grad_clip)->default_value(v.grad_clip), "global gradient-norm bound (0: no clipping)")
    ("seed", po::value(&v.seed)->default_value(v.seed), "seed of the initialisation and the synthetic tokens")
    ("device", po::value(&v.device)->default_value(v.device, "cuda if a GPU exists, else cpu"), "cpu or cuda")
    ("data", po::value(&v.data)->default_value(v.data, "synthetic"),
     "token files (a glob, quoted), read in sorted order; synthetic uniform tokens when absent")
    ("data-format", po::value(&v.data_format)->default_value(v.data_format),
     "llmc (llm.c shards: 256 x int32 header, uint16 ids) or raw (headerless uint16 ids)");
  // clang-format on
}

namespace {

// Runs parse(), prefixing any UsageError with the flag it came from.
template <typename Parse>
auto parse_flag(const char* flag, Parse parse) {
  try {
    return parse();
  } catch (const UsageError& e) {
    throw UsageError(cat("--", flag, ": ", e.what()));
  }
}

void require_positive(int64_t value, const char* flag) {
  if (value <= 0) throw UsageError(cat("--", flag, ": must be a positive integer, got ", value));
}

Device resolve_device(const std::string& requested) {
  if (requested.empty()) return Device::cpu();  // the CUDA backend is not part of this build yet
  Device device = parse_flag("device", [&] { return parse_device(requested); });
  if (device.is_cuda()) {
    const int gpus = cuda_device_count();
    throw UsageError(cat("--device ", requested, ": this build has no CUDA backend yet (", gpus,
                         " GPU(s) visible); accepted: cpu"));
  }
  return device;
}

}  // namespace

TrainingRun validate_training_flags(const TrainingFlags& f) {
  TrainingRun run;
  TrainingOptions& o = run.options;
  o.model = resolve_model(f.model);
  require_positive(f.batch_size, "batch-size");
  require_positive(f.num_steps, "num-steps");
  require_positive(f.grad_accum, "grad-accum");
  if (f.seq_length < 0) throw UsageError(cat("--seq-length: must be a positive integer, got ", f.seq_length));
  o.batch = f.batch_size;
  o.seq = f.seq_length ? f.seq_length : std::min<int64_t>(512, o.model.max_seq_len);
  if (o.seq > o.model.max_seq_len) {
    throw UsageError(cat("--seq-length: ", o.seq, " exceeds ", o.model.name, "'s maximum of ", o.model.max_seq_len));
  }
  o.grad_accum = f.grad_accum;
  if (!(f.lr > 0)) throw UsageError(cat("--lr: must be positive, got ", f.lr));
  o.optimizer.kind = parse_flag("optimizer", [&] { return parse_optimizer_kind(f.optimizer); });
  o.optimizer.lr = float(f.lr);
  o.optimizer.weight_decay = f.weight_decay >= 0 ? float(f.weight_decay)
                             : o.optimizer.kind == OptimizerKind::adamw ? 0.01f : 0.0f;
  if (f.momentum < 0 || f.momentum >= 1) throw UsageError(cat("--momentum: must be in [0, 1), got ", f.momentum));
  o.optimizer.momentum = float(f.momentum);
  if (f.grad_clip < 0) throw UsageError(cat("--grad-clip: must be 0 (off) or positive, got ", f.grad_clip));
  o.grad_clip = float(f.grad_clip);
  o.seed = f.seed;
  run.device = resolve_device(f.device);
  o.dtype = DType::f32;
  run.num_steps = f.num_steps;
  run.data_glob = f.data;
  run.data_format = parse_token_file_format(f.data_format);  // its message names --data-format
  return run;
}

std::unique_ptr<TokenSource> make_token_source(const TrainingRun& run, int rank, int world) {
  const BatchGeometry geometry{run.options.batch, run.options.seq, rank, world};
  if (run.data_glob.empty()) return make_synthetic_tokens(geometry, run.options.model.vocab_size, run.options.seed);
  try {
    return make_file_tokens(run.data_glob, run.data_format, geometry, run.options.model.vocab_size);
  } catch (const IoError& e) {  // a bad file named on the command line is bad input: refused before training
    throw UsageError(cat("--data: ", e.what()));
  }
}

int run_program(int argc, char** argv, const std::string& usage, po::options_description& flags,
                const std::function<int()>& body) {
  flags.add_options()("help,h", "print this help and exit");
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(flags).run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << flags << "\n";
      return 0;
    }
    po::notify(vm);
    return body();
  } catch (const po::error& e) {
    std::cerr << "error: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace zb
