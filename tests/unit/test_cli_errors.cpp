// The `halcyon` command as a new user meets it (issue 22): no crash, hang or abort on bad
// input; every failure one line and exit status 2 (usage) or 1 (runtime); options that agree
// between commands.
#include <halcyon/runtime/npy.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runtime_test_support.hpp"

using test::unwrap;

namespace {

std::string tmp(const std::string& name) { return std::string(HALCYON_TEST_TMP) + "/cli_errors/" + name; }

struct Outcome {
  int status = -1;  // exit status; 128 + N for signal N; 124 when it ran past the limit (a hang)
  std::string output;
  int lines() const {
    int n = 0;
    for (char c : output) n += c == '\n';
    return n;
  }
};

Outcome cli(const std::string& args, const std::string& env = "", int limit_s = 120) {
  std::string log = tmp("out.log");
  std::string cmd = fmt::format("{} timeout {} {} {} > {} 2>&1", env, limit_s, HALCYON_CLI, args, log);
  int rc = std::system(cmd.c_str());
  Outcome o;
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  std::ifstream f(log);
  o.output.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return o;
}

void setup() { REQUIRE(std::system(("mkdir -p " + tmp("")).c_str()) == 0); }

// A one-line error with this exit status that mentions `needle`.
void expect_error(const std::string& args, int status, const std::string& needle) {
  Outcome o = cli(args);
  INFO("halcyon ", args, "\n", o.output);
  CHECK(o.status == status);
  CHECK(o.lines() == 1);
  CHECK(o.output.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("cli: demo on the CPU with a token count of its own runs (host memory outlived its write)") {
  setup();
  Outcome o = cli("demo --device cpu --tokens 8 --iters 1");
  INFO(o.output);
  CHECK(o.status == 0);
  CHECK(o.output.find("PASS") != std::string::npos);
}

TEST_CASE("cli: numeric options are parsed whole and range-checked") {
  setup();
  expect_error("demo --tokens abc", 2, "--tokens: 'abc' is not an integer");
  expect_error("demo --tokens 99999999999999999999", 2, "--tokens");
  expect_error("demo --tokens 0", 2, "--tokens: '0'");
  expect_error("demo --iters -3", 2, "--iters: '-3'");
  expect_error("demo --iters 5x", 2, "--iters: '5x'");
  expect_error("bench moe --tokens 1e9", 2, "--tokens: '1e9'");
  expect_error("bench moe --hidden -64", 2, "--hidden: '-64'");
  expect_error("bench moe --experts 0", 2, "--experts: '0'");
  expect_error("bench moe --iters 99999999999999999999999", 2, "--iters");
  expect_error("bench moe --peak-tflops nan", 2, "--peak-tflops: 'nan'");
  expect_error("bench moe --peak-tflops 0", 2, "--peak-tflops: '0'");
  expect_error("bench moe --preheat-ms -1", 2, "--preheat-ms: '-1'");
  // moe-sizes refuses what it would ignore, and empty entries of --sizes.
  for (const char* opt : {"--dtype fp8", "--json x.json", "--iters 3", "--tokens 8", "--peak-tflops 9", "--preheat-ms 5"})
    expect_error(std::string("bench moe-sizes --device cpu:0 --sizes 3 ") + opt, 2, "is an option of bench moe only");
  for (const char* sizes : {"7,3,", "''", "7,,3"})
    expect_error(std::string("bench moe-sizes --device cpu:0 --sizes ") + sizes, 2, "has an empty entry");
  // ... and takes the layer's options: a name its operator lacks is refused.
  Outcome named = cli("bench moe-sizes --device cpu:0 --rounds 1 --sizes 3 --impl moe_gate=bogus");
  CHECK(named.status == 1);
  CHECK_MESSAGE(named.output.find("no implementation named 'bogus'") != std::string::npos, named.output);
  // The path is chosen by --path; the variable that chose it once is refused, naming the option.
  for (auto [value, option] : {std::pair{"0", "--path copy"}, std::pair{"1", "--path gather"}}) {
    Outcome o = cli("bench moe --device cpu:0 --tokens 8", std::string("HALCYON_MOE_GATHER=") + value);
    INFO(o.output);
    CHECK(o.status == 2);
    CHECK(o.lines() == 1);
    CHECK(o.output.find(option) != std::string::npos);
  }
  expect_error("bench attention --iters x", 2, "--iters: 'x'");
  expect_error("bench attention --seqlen -5", 2, "--seqlen: '-5'");
  expect_error("bench attention --preheat-ms 0", 2, "--preheat-ms: '0'");
  expect_error("bench attention --batch", 2, "--batch needs a value");
  expect_error("bench attention mla --mla-shapes 64", 2, "'64' is not HQxSQ");
  expect_error("bench attention mla --mla-shapes 64x2,256x1", 2, "--mla-shapes Hq: '256'");
  expect_error("bench attention mla --mla-shapes 64x0", 2, "--mla-shapes Sq: '0'");
  expect_error("run vector_add --in a=x.npy --set N=12abc --out " + tmp("o"), 2, "'12abc'");
}

TEST_CASE("cli: directories and FIFOs where files belong are errors, not exceptions or hangs") {
  setup();
  std::string dir = tmp("a_folder");
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  expect_error("launch --device cpu --module " + dir + " --kernel k --grid 1 --block 1 --out " + tmp("o"), 1,
               "not a regular file");
  expect_error("run vector_add --in a=" + dir + " --in b=" + dir + " --out " + tmp("o"), 1, "not a regular file");
  std::string fifo = tmp("a_fifo.npy");
  std::remove(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  expect_error("run vector_add --in a=" + fifo + " --in b=" + fifo + " --out " + tmp("o"), 1, "not a regular file");
}

TEST_CASE("cli: .npy headers that overflow are refused before anything is allocated") {
  setup();
  std::vector<float> four(4, 1.0f);
  // A valid file, then its header rewritten to claim (2^62, 4) floats: 2^66 bytes.
  std::string path = tmp("huge.npy");
  unwrap(halcyon::rt::write_npy(path, "<f4", {1, 4}, four.data(), 16));
  std::string text;
  {
    std::ifstream f(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  size_t at = text.find("(1, 4)");
  REQUIRE(at != std::string::npos);
  text.replace(at, 6, "(4611686018427387904, 4)");
  text.erase(text.find('\n') - 18, 18);  // keep the header length
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  expect_error("run moe_permute --in x=" + path + " --in topk_ids=" + path + " --out " + tmp("o"), 1,
               "more than 2^63 bytes");
}

TEST_CASE("cli: huge shapes are errors: past 2^63 bytes at binding, too large to allocate at allocation") {
  setup();
  std::vector<uint16_t> none;
  auto empty = [&](const std::string& name, std::vector<int64_t> shape) {
    unwrap(halcyon::rt::write_npy(tmp(name), "<u2", shape, none.data(), 0));
    return tmp(name);
  };
  const int64_t t40 = int64_t(1) << 40, t30 = int64_t(1) << 30;
  expect_error("run gemm_bf16 --in a=" + empty("a40.npy", {t40, 0}) + " --in b=" + empty("b40.npy", {0, t40}) +
                   " --out " + tmp("o"),
               1, "more than 2^63 bytes");
  // c = [2^30, 2^30] f32: 4 EiB, a size that fits in int64 but in no memory.
  expect_error("run gemm_bf16 --in a=" + empty("a30.npy", {t30, 0}) + " --in b=" + empty("b30.npy", {0, t30}) +
                   " --out " + tmp("o"),
               1, "HAL_OUT_OF_MEMORY");
}

TEST_CASE("cli: a failing launch releases its events and exits (the CPU backend hung)") {
  setup();
  // gemm_bf16 with M = 2^50, K = N = 0: no bytes, so it binds and allocates; the launch of
  // 2^34 blocks is refused after the start event's record was queued, and the command
  // returns, releasing its events before its tensors (whose release drains the stream).
  // Before the fix: a hang or, under ASan, a use after free.
  std::vector<uint16_t> none;
  unwrap(halcyon::rt::write_npy(tmp("a50.npy"), "<u2", {int64_t(1) << 50, 0}, none.data(), 0));
  unwrap(halcyon::rt::write_npy(tmp("b00.npy"), "<u2", {0, 0}, none.data(), 0));
  Outcome o = cli("run gemm_bf16 --in a=" + tmp("a50.npy") + " --in b=" + tmp("b00.npy") + " --out " + tmp("g0"), "", 60);
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("blocks is too many") != std::string::npos);
}

TEST_CASE("cli: --out that cannot be created fails before the operator runs") {
  setup();
  std::vector<float> a = {1, 2};
  unwrap(halcyon::rt::write_npy(tmp("v.npy"), "<f4", {2}, a.data(), 8));
  std::string in = " --in a=" + tmp("v.npy") + " --in b=" + tmp("v.npy");
  expect_error("run vector_add" + in + " --out /proc/no/such/folder", 1, "cannot create --out /proc/no/such/folder");
  std::ofstream(tmp("a_file")) << "x";
  expect_error("run vector_add" + in + " --out " + tmp("a_file"), 1, "is not a folder");
}

TEST_CASE("cli: bench ep's rank processes get the global options given before the command") {
  setup();
  // Each process logs what it hands to hal_init at debug level: the parent and both ranks.
  Outcome o = cli("--log-level debug bench ep --ranks 2 --tokens 4 --iters 1 --experts 4 --topk 2 --hidden 16 --inter 16",
                  "env -u HALCYON_LOG");
  INFO(o.output);
  CHECK(o.status == 0);
  int inits = 0;
  for (size_t at = o.output.find("hal_init backend_path"); at != std::string::npos;
       at = o.output.find("hal_init backend_path", at + 1))
    ++inits;
  CHECK(inits == 3);
}

TEST_CASE("cli: bad values of run's and launch's options are usage errors (2), named before anything runs") {
  setup();
  std::vector<float> a = {1, 2};
  unwrap(halcyon::rt::write_npy(tmp("v.npy"), "<f4", {2}, a.data(), 8));
  const std::string out = " --out " + tmp("usage_out");
  expect_error("run moe_gate --set topk=abc" + out, 2, "parameter 'topk': 'abc' is not an integer");
  expect_error("run moe_gate --set topk=2 --set topk=3" + out, 2, "--set topk is given twice");
  expect_error("run vector_add --in c=" + tmp("v.npy") + out, 2, "has no input 'c' (it is an output");
  expect_error("run vector_add --in a=" + tmp("v.npy") + " --in a=" + tmp("v.npy") + out, 2, "--in a is given twice");
  // A float64 value beyond float32's range is refused, not turned into an infinity (exit 1: the data).
  std::vector<double> huge = {1.0, 1e300};
  unwrap(halcyon::rt::write_npy(tmp("huge.npy"), "<f8", {2}, huge.data(), 16));
  expect_error("run vector_add --in a=" + tmp("huge.npy") + " --in b=" + tmp("v.npy") + out, 1,
               "input 'a': element 1 = 1e+300 does not fit in float32");
  const std::string launch = "launch --device cpu:0 --module m.so --kernel k --out " + tmp("usage_out") + " ";
  expect_error(launch + "--grid 0", 2, "--grid: '0'");
  expect_error(launch + "--block ' 4'", 2, "--block: ' 4'");
  expect_error(launch + "--shared -1", 2, "--shared: '-1'");
  expect_error(launch + "--arg \"u64: -1\"", 2, "' -1' is not a valid u64");
  expect_error(launch + "--arg i32:x", 2, "'x' is not a valid i32");
  expect_error(launch + "--arg buf:x=a.npy --arg buf:x=b.npy", 2, "buf:x is given twice");
}

TEST_CASE("cli: a full disk under an output file is an error, not a success") {
  setup();
  // /dev/full takes the open and fails the writes: buffered bytes fail only when flushed.
  std::vector<float> a = {1, 2};
  unwrap(halcyon::rt::write_npy(tmp("v.npy"), "<f4", {2}, a.data(), 8));
  REQUIRE(std::system(("rm -rf " + tmp("full") + " && mkdir -p " + tmp("full") + " && ln -s /dev/full " +
                       tmp("full/c.npy")).c_str()) == 0);
  Outcome o = cli("run vector_add --in a=" + tmp("v.npy") + " --in b=" + tmp("v.npy") + " --out " + tmp("full"));
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("c.npy: write failed") != std::string::npos);
  o = cli("bench moe --device cpu:0 --tokens 4 --experts 4 --topk 2 --hidden 16 --inter 16 --groups 1 "
          "--topk-groups 1 --iters 1 --json /dev/full");
  INFO(o.output);
  CHECK(o.status == 1);
  CHECK(o.output.find("halcyon bench: writing /dev/full failed") != std::string::npos);
}

TEST_CASE("cli: --help exits 0 everywhere, --version works, unknown options exit 2") {
  setup();
  for (const char* cmd : {"--help", "bench --help", "bench moe --help", "bench attention --help", "demo --help", "run --help", "info --help",
                          "version --help", "cts --help", "launch --help"}) {
    Outcome o = cli(cmd);
    INFO("halcyon ", cmd, "\n", o.output);
    CHECK(o.status == 0);
  }
  Outcome v = cli("--version");
  CHECK(v.status == 0);
  CHECK(v.output.find("C ABI") != std::string::npos);
  expect_error("version --bogus", 2, "unknown option '--bogus'");
  CHECK(cli("demo --bogus").status == 2);
  CHECK(cli("bench moe --bogus 1").status == 2);
  expect_error("bench attention --bogus", 2, "unknown argument '--bogus'");
}

TEST_CASE("cli: cts on a device that does not exist is an error, not a skip") {
  setup();
  Outcome o = cli("cts --device cpu:1 --filter api.buffer*");
  INFO(o.output);
  CHECK(o.status == 2);
  CHECK(o.output.find("cpu:0") != std::string::npos);  // names the devices there are
  CHECK(cli("cts --device nosuchbackend:0 --filter api.buffer*").status == 77);
  CHECK(cli("cts --list --device cpu:1").status == 2);
}

TEST_CASE("cli: info -v says why a plugin folder gave nothing, and never opens a FIFO") {
  setup();
  std::string empty = tmp("no_plugins");
  REQUIRE(std::system(("mkdir -p " + empty).c_str()) == 0);
  Outcome o = cli("info -v", "HALCYON_BACKEND_PATH=" + empty);
  CHECK(o.status == 0);
  CHECK_MESSAGE(o.output.find("no libhalcyon_backend_*.so file") != std::string::npos, o.output);
  std::string fifo = tmp("libhalcyon_backend_fifo.so");
  std::remove(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  o = cli("info -v", "HALCYON_BACKEND_PATH=" + fifo, 30);
  CHECK_MESSAGE(o.status == 0, o.output);  // 124: discovery blocked on the FIFO
  CHECK_MESSAGE(o.output.find("not a regular file") != std::string::npos, o.output);
}

// libhalcyon reads no environment (hal.h, hal_init); the CLI maps its documented variables and
// global options to hal_init_desc, and a bad value is one line and exit status 2.
TEST_CASE("cli: environment variables and global options reach hal_init as fields and backend options") {
  setup();
  std::string empty = tmp("no_plugins");
  REQUIRE(std::system(("mkdir -p " + empty).c_str()) == 0);
  Outcome o = cli("--backend-path " + empty + " info -v");
  CHECK(o.status == 0);
  CHECK_MESSAGE(o.output.find("no libhalcyon_backend_*.so file") != std::string::npos, o.output);
  // The options handed over are logged at debug level, environment first, then the flags.
  o = cli("--log-level debug --backend-option ze.loader=/z version",
          "HALCYON_CACHE_DIR=/hc HALCYON_CUDA_LIBRARY=/x/libcuda.so.1 HALCYON_SIM_COVERAGE=/c.txt");
  CHECK(o.status == 0);
  CHECK_MESSAGE(o.output.find("backend_options 'cuda.cache_dir=/hc/ptx;cuda.library=/x/libcuda.so.1;"
                              "amdgpu-sim.coverage=/c.txt;ze.loader=/z'") != std::string::npos, o.output);
  o = cli("version", "HALCYON_LOG=debug HALCYON_PTX_CACHE=off XDG_CACHE_HOME=/xdg");
  CHECK_MESSAGE(o.output.find("'cuda.cache_dir=off'") != std::string::npos, o.output);
  o = cli("version", "env -u HALCYON_CACHE_DIR -u HALCYON_PTX_CACHE HALCYON_LOG=debug XDG_CACHE_HOME=/xdg");
  CHECK_MESSAGE(o.output.find("'cuda.cache_dir=/xdg/halcyon/ptx'") != std::string::npos, o.output);
  o = cli("version", "env -u HALCYON_CACHE_DIR -u HALCYON_PTX_CACHE -u XDG_CACHE_HOME HALCYON_LOG=debug HOME=/h");
  CHECK_MESSAGE(o.output.find("'cuda.cache_dir=/h/.cache/halcyon/ptx'") != std::string::npos, o.output);
  o = cli("version");  // warnings only by default: no debug line
  CHECK_MESSAGE(o.output.find("hal_init backend_path") == std::string::npos, o.output);
  expect_error("--log-level verbose version", 2, "log_level 'verbose' is not debug, info, warning or error");
  o = cli("version", "HALCYON_LOG=loud");
  CHECK(o.status == 2);
  CHECK_MESSAGE(o.output.find("log_level 'loud'") != std::string::npos, o.output);
  expect_error("--backend-option nodot=1 version", 2, "backend option 'nodot=1' is not <backend>.<key>=<value>");
  // A key that an available backend does not read is a misspelling, named (cpu: the one backend
  // every build has, the sanitizer builds included); one for a backend not tried is only logged.
  expect_error("--backend-option cpu.threads=4 version", 2, "backend option 'cpu.threads': backend cpu has no option 'threads'");
  CHECK(cli("--backend-option nosuchbackend.key=1 version").status == 0);
  expect_error("--log-level", 2, "--log-level: a value is needed");
  // One option per flag: none empty, none smuggling a second in through ';'.
  expect_error("--backend-option '' version", 2, "--backend-option '' is not one");
  expect_error("--backend-option 'cpu.x=1;ze.loader=/evil' version", 2, "is not one <backend>.<key>=<value>");
  // A variable's ';' would split into options of its own: refused, naming the variable; a home
  // folder with one in its name (legal) only turns the PTX cache off.
  o = cli("version", "HALCYON_CUDA_LIBRARY='/x;cuda.cache_dir=/evil'");
  CHECK(o.status == 2);
  CHECK_MESSAGE(o.output.find("HALCYON_CUDA_LIBRARY='/x;cuda.cache_dir=/evil' holds ';'") != std::string::npos, o.output);
  o = cli("version", "env -u HALCYON_CACHE_DIR -u HALCYON_PTX_CACHE -u XDG_CACHE_HOME HALCYON_LOG=debug HOME='/h;x'");
  CHECK(o.status == 0);
  CHECK_MESSAGE(o.output.find("'cuda.cache_dir=off'") != std::string::npos, o.output);
  // --help after the global options is still help.
  Outcome help = cli("--log-level error --help");
  CHECK(help.status == 0);
  CHECK_MESSAGE(help.output.find("usage") != std::string::npos, help.output);
}

TEST_CASE("cli: bench picks the best device, says so, and has no made-up FLOP floor on the CPU") {
  setup();
  Outcome o = cli("bench moe --tokens 8 --experts 8 --topk 2 --hidden 64 --inter 32 --groups 2 --topk-groups 1 --iters 1");
  INFO(o.output);
  CHECK(o.status == 0);
  // The best device is a GPU where one runs the layer (the GPU machine), else the CPU.
  const size_t at = o.output.find("device: ");
  REQUIRE(at != std::string::npos);
  const std::string chosen = o.output.substr(at + 8, o.output.find(' ', at + 8) - at - 8);
  CHECK(o.output.find("device: " + chosen + " (the best device here") != std::string::npos);
  CHECK(chosen.rfind("amdgpu-sim", 0) != 0);  // a simulator is never the best device
  if (chosen.rfind("cpu", 0) == 0) {
    CHECK(o.output.find("FLOP floor unknown") != std::string::npos);
    // A device named with --device is not announced as the best one.
    Outcome cpu = cli("bench moe --device cpu --tokens 8 --experts 8 --topk 2 --hidden 64 --inter 32 --groups 2 "
                      "--topk-groups 1 --iters 1");
    CHECK(cpu.output.find("the best device here") == std::string::npos);
  }
}

TEST_CASE("cli: bench overlap on the CPU sweeps, plans, and writes its JSON and SVG") {
  setup();
  const std::string json = tmp("overlap.json"), svg = tmp("overlap.svg");
  std::remove(json.c_str());
  std::remove(svg.c_str());
  Outcome o = cli(fmt::format("bench overlap --device cpu --tokens 8 --topk 2 --experts 4 --hidden 64 --inter 32 "
                              "--comm-units 1 --chunks 2,8 --iters 2 --json {} --svg {}",
                              json, svg));
  INFO(o.output);
  REQUIRE(o.status == 0);
  CHECK(o.output.find("planner's choice within") != std::string::npos);
  CHECK(o.output.find("summary:") != std::string::npos);
  std::ifstream jf(json), sf(svg);
  std::string j((std::istreambuf_iterator<char>(jf)), std::istreambuf_iterator<char>());
  std::string s((std::istreambuf_iterator<char>(sf)), std::istreambuf_iterator<char>());
  CHECK(j.find("\"planner_choice\": {\"comm_units\": 1") != std::string::npos);
  CHECK(j.find("\"sweep\": [") != std::string::npos);
  CHECK(j.find("\"chunk_rows\": 2,") != std::string::npos);
  CHECK(j.find("\"chunk_rows\": 8,") != std::string::npos);
  CHECK(j.find("\"rates\": {\"comm_bytes_per_unit\"") != std::string::npos);
  CHECK(s.rfind("<svg", 0) == 0);
  CHECK(s.find("</svg>") != std::string::npos);
}

TEST_CASE("cli: bench overlap's bad options are one-line errors with exit 2") {
  setup();
  const std::pair<const char*, const char*> cases[] = {
      {"--iters 0", "--iters: '0'"},
      {"--chunks 16,x", "--chunks: 'x'"},
      {"--chunks 0", "--chunks: '0'"},
      {"--comm-units 100000", "--comm-units: 100000 is not a split"},
      {"--tokens", "--tokens needs a value"},
      {"--bogus 1", "unknown option '--bogus'"}};
  for (auto& [options, needle] : cases) expect_error(std::string("bench overlap --device cpu ") + options, 2, needle);
}

// Every malformed form of a .npy input that issue 21 lists, through `halcyon run`: one line
// that names the file and the problem, exit status 1, never a signal.
TEST_CASE("cli: malformed .npy inputs are one-line errors naming the file and the problem") {
  setup();
  auto header = [](const std::string& descr, const std::string& fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  };
  const auto good = test::npy_bytes(header("<f4", "False", "(4,)"), std::string(16, '\0'));
  auto cut = [&](size_t n) { return std::vector<unsigned char>(good.begin(), good.begin() + long(n)); };
  auto magic = good;
  magic[1] = 'X';
  struct Bad {
    const char* file;
    std::vector<unsigned char> bytes;
    const char* problem;
  };
  const Bad bad[] = {
      {"trunc_header.npy", cut(20), "truncated header"},
      {"trunc_data.npy", cut(good.size() - 4), "holds 12 data bytes"},
      {"magic.npy", magic, "bad magic"},
      {"fortran.npy", test::npy_bytes(header("<f4", "True", "(4,)"), std::string(16, '\0')), "Fortran-order"},
      {"big_endian.npy", test::npy_bytes(header(">f4", "False", "(4,)"), std::string(16, '\0')), "not a little-endian"},
      {"complex.npy", test::npy_bytes(header("<c8", "False", "(4,)"), std::string(32, '\0')), "is <c8"},
      {"huge_dim.npy", test::npy_bytes(header("<f4", "False", "(99999999999999999999,)")), "64 bits"},
      {"negative_dim.npy", test::npy_bytes(header("<f4", "False", "(-4,)")), "non-negative"},
      {"overflow.npy", test::npy_bytes(header("<f4", "False", "(4611686018427387904, 4)")), "more than 2^63 bytes"},
  };
  auto write = [](const std::string& path, const std::vector<unsigned char>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };
  write(tmp("good4.npy"), good);
  for (const Bad& b : bad) {
    CAPTURE(b.file);
    write(tmp(b.file), b.bytes);
    Outcome o = cli("run vector_add --in a=" + tmp(b.file) + " --in b=" + tmp("good4.npy") + " --out " + tmp("o_bad"));
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.lines() == 1);
    CHECK(o.output.find(tmp(b.file) + ": ") != std::string::npos);
    CHECK(o.output.find(b.problem) != std::string::npos);
  }
}
