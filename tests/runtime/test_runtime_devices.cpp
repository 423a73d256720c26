// Nodes on CUDA devices (`devices: {kind: cuda, count: N}`): without a usable GPU, or in a
// build without the CUDA backend, the node refuses to start and `up` says why in one line;
// with one, the node's workers run the CUDA backend and answer the eval prompts. Run as
// test_runtime_devices_gpu (label gpu), the program exits 77 (skipped) where no GPU is usable.
#define BOOST_TEST_MODULE test_runtime_devices
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#if DLS_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif

#include <cstdlib>
#include <string>

namespace utf = boost::unit_test;
using dls::test::cluster;

namespace {

int usable_gpus() {
#if DLS_HAVE_CUDA
  return dls::gpu::cuda_device_count();
#else
  return 0;
#endif
}

struct has_gpu {
  boost::test_tools::assertion_result operator()(utf::test_unit_id) const {
    boost::test_tools::assertion_result r(usable_gpus() > 0);
    r.message() << "no usable CUDA device (or no CUDA backend in this build)";
    return r;
  }
};

struct has_no_gpu {
  boost::test_tools::assertion_result operator()(utf::test_unit_id) const {
    boost::test_tools::assertion_result r(usable_gpus() == 0);
    r.message() << "a CUDA device is usable here";
    return r;
  }
};

std::string cuda_nodes(int count, int tp) {
  return "nodes:\n  - name: gpu0\n    host: 127.0.0.1\n    devices: {kind: cuda, count: " + std::to_string(count) +
         "}\n    groups: [" + std::to_string(tp) + "]\n";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_cuda_node_without_a_usable_gpu_is_refused_in_one_line, *utf::precondition(has_no_gpu())) {
  dls::test::scratch_dir dir;
  const auto cfg = dls::test::write_test_config(dir, "local.yaml", 0, cuda_nodes(1, 1));
  const auto up = dls::test::run_cli({"up", cfg, "--state-dir", dir.file("state"), "--timeout", "60"});
  BOOST_TEST(up.rc != 0);
  BOOST_TEST(up.err.find("cuda") != std::string::npos, up.err);
  // Nothing is left running: `down` finds no cluster or stops what is there.
  dls::test::run_cli({"down", "--state-dir", dir.file("state"), "--timeout", "10"});
}

BOOST_AUTO_TEST_CASE(a_cuda_node_serves_the_eval_prompts, *utf::precondition(has_gpu())) {
  const int gpus = usable_gpus();
  const int tp = gpus >= 2 ? 2 : 1;
  cluster c("local.yaml", 0, cuda_nodes(tp, tp) + "scheduler: {policy: dilaserve, quality: " + std::string(DLS_SOURCE_DIR) +
                                 "/configs/quality/tiny-llada.json}\n");
  const auto problems = dls::test::eval_problems(40);
  const auto file = dls::test::write_prompts(c.scratch(), problems);
  const auto out = c.json_cli({"submit", "--file", file, "--json", "--timeout", "120"});
  const auto& s = out["summary"];
  BOOST_TEST(out["results"].size() == problems.size());
  // The CPU engine answers 99.9 % of the eval set at tau 0.9; bf16 weights may flip an
  // answer or two of 40, not more.
  BOOST_TEST(s["accuracy"].get<double>() >= 0.9, out.dump());
  const auto status = c.json_cli({"actors", "--kind", "worker", "--json"});
  BOOST_TEST(status.dump().find("cuda:") != std::string::npos, status.dump());
}

int main(int argc, char** argv) {
  // As the gpu-labelled test, report skipped (77) where there is nothing to run.
  if (std::getenv("DLS_REQUIRE_GPU") && usable_gpus() == 0) return 77;
  return utf::unit_test_main(&init_unit_test, argc, argv);
}
