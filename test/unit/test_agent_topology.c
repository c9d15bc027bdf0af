/*
 * Islands and their bandwidth from recorded interconnect matrices, and the
 * NVIDIA architecture and NVLink tables.
 */
#include "test_agent_util.h"

#include "agent_parse.h"

/* A vendor result of n whole GPUs of one model over a recorded matrix. */
static struct agent_vendor_result *with_topo(enum gpu_vendor v, const char *topo_rel, int n,
					     const char *model, const char *arch, const char *cc)
{
	struct agent_vendor_result *vr = calloc(1, sizeof(*vr));
	assert_non_null(vr);
	agent_vendor_result_init(vr, v);
	char *t = ta_read(topo_rel);
	char err[256];
	int rc = v == GPU_VENDOR_NVIDIA ? nvsmi_parse_topo(t, &vr->topo, err, sizeof(err))
					: rocm_parse_topo(t, &vr->topo, err, sizeof(err));
	if (rc)
		fail_msg("%s: %s", topo_rel, err);
	free(t);
	assert_int_equal(vr->topo.n, n);
	vr->have_topo = true;
	for (int i = 0; i < n; i++) {
		struct agent_gpu *g = &vr->gpu[vr->ngpu++];
		g->vendor = v;
		g->index = i;
		g->mig_index = -1;
		snprintf(g->model, sizeof(g->model), "%s", model);
		snprintf(g->arch, sizeof(g->arch), "%s", arch);
		snprintf(g->compute_cap, sizeof(g->compute_cap), "%s", cc);
	}
	return vr;
}

static void test_nvswitch_a100_one_island(void **state)
{
	(void)state;
	struct agent_vendor_result *vr = with_topo(GPU_VENDOR_NVIDIA, "nvidia/a100-sxm4-80gb-8gpu.topo.txt", 8,
						   "NVIDIA A100-SXM4-80GB", "ampere", "8.0");
	assert_int_equal(agent_compute_islands(vr), 1);
	for (int i = 0; i < 8; i++) {
		assert_string_equal(vr->gpu[i].island, "nvlink-0");
		/* NV12 to every peer is the 12 links of the GPU, not 7 x 12 */
		assert_true(vr->gpu[i].bandwidth_gbps == 600.0);
	}
	free(vr);
}

static void test_nvswitch_h100_900(void **state)
{
	(void)state;
	struct agent_vendor_result *vr = with_topo(GPU_VENDOR_NVIDIA, "nvidia/h100-8gpu-nv18.topo.txt", 8,
						   "NVIDIA H100 80GB HBM3", "hopper", "9.0");
	assert_int_equal(agent_compute_islands(vr), 1);
	assert_true(vr->gpu[5].bandwidth_gbps == 900.0);
	free(vr);
}

static void test_dgx1_cube_mesh_is_one_island(void **state)
{
	(void)state;
	/* each V100 has NV1+NV1+NV2+NV2 = 6 links: 300 GB/s */
	struct agent_vendor_result *vr = with_topo(GPU_VENDOR_NVIDIA, "nvidia/v100-sxm2-8gpu-dgx1.topo.txt", 8,
						   "Tesla V100-SXM2-16GB", "volta", "7.0");
	assert_int_equal(agent_compute_islands(vr), 1);
	for (int i = 0; i < 8; i++)
		assert_true(vr->gpu[i].bandwidth_gbps == 300.0);
	free(vr);
}

static void test_pcie_only_box_has_no_islands(void **state)
{
	(void)state;
	struct agent_vendor_result *vr = with_topo(GPU_VENDOR_NVIDIA, "nvidia/l4-8gpu-pcie.topo.txt", 8,
						   "NVIDIA L4", "ada", "8.9");
	assert_int_equal(agent_compute_islands(vr), 0);
	for (int i = 0; i < 8; i++) {
		assert_string_equal(vr->gpu[i].island, "");
		assert_true(vr->gpu[i].bandwidth_gbps == 0);
	}
	free(vr);
}

static void test_mig_and_missing_gpus_stay_out(void **state)
{
	(void)state;
	struct agent_vendor_result *vr = with_topo(GPU_VENDOR_NVIDIA, "nvidia/v100-sxm2-8gpu-dgx1.topo.txt", 8,
						   "Tesla V100-SXM2-16GB", "volta", "7.0");
	/* GPU 0 became two MIG instances (pretend), GPU 7 went missing */
	vr->gpu[0].mig_index = 0;
	vr->gpu[7] = vr->gpu[0];
	vr->gpu[7].mig_index = 1;
	assert_int_equal(agent_compute_islands(vr), 1);
	assert_string_equal(vr->gpu[0].island, "");
	assert_string_equal(vr->gpu[7].island, "");
	assert_string_equal(vr->gpu[1].island, "nvlink-0");
	/* without GPUs 0 and 7, GPU 4 keeps only NV1 to 5 and NV1 to 6: 2 links, the
	   fewest of any member, so the island is published at 2 x 50 GB/s */
	assert_true(vr->gpu[1].bandwidth_gbps == 100.0);
	free(vr);
}

static void test_amd_two_hives(void **state)
{
	(void)state;
	struct agent_vendor_result *vr = with_topo(GPU_VENDOR_AMD, "amd/two-hives-8gpu.showtopo.txt", 8,
						   "AMD Instinct MI210", "gfx90a", "");
	assert_int_equal(agent_compute_islands(vr), 2);
	for (int i = 0; i < 4; i++)
		assert_string_equal(vr->gpu[i].island, "xgmi-0");
	for (int i = 4; i < 8; i++)
		assert_string_equal(vr->gpu[i].island, "xgmi-1");
	assert_true(vr->gpu[0].bandwidth_gbps == 300.0);
	free(vr);

	vr = with_topo(GPU_VENDOR_AMD, "amd/mi308x-8gpu.showtopo.txt", 8, "AMD Instinct MI300X", "gfx942", "");
	assert_int_equal(agent_compute_islands(vr), 1);
	assert_true(vr->gpu[7].bandwidth_gbps == 896.0);
	free(vr);

	vr = with_topo(GPU_VENDOR_AMD, "amd/pcie-4gpu.showtopo.txt", 4, "AMD Instinct MI100", "gfx908", "");
	assert_int_equal(agent_compute_islands(vr), 0);
	free(vr);
}

static void test_no_topology_no_islands(void **state)
{
	(void)state;
	struct agent_vendor_result *vr = calloc(1, sizeof(*vr));
	agent_vendor_result_init(vr, GPU_VENDOR_NVIDIA);
	vr->ngpu = 2;
	vr->gpu[1].index = 1;
	snprintf(vr->gpu[0].island, sizeof(vr->gpu[0].island), "stale");
	assert_int_equal(agent_compute_islands(vr), 0);
	assert_string_equal(vr->gpu[0].island, "");
	free(vr);
}

static void test_nvidia_arch_table(void **state)
{
	(void)state;
	assert_string_equal(agent_nvidia_arch("9.0", "NVIDIA H100 80GB HBM3"), "hopper");
	assert_string_equal(agent_nvidia_arch("8.0", ""), "ampere");
	assert_string_equal(agent_nvidia_arch("8.6", ""), "ampere");
	assert_string_equal(agent_nvidia_arch("8.9", ""), "ada");
	assert_string_equal(agent_nvidia_arch("7.5", ""), "turing");
	assert_string_equal(agent_nvidia_arch("7.0", ""), "volta");
	assert_string_equal(agent_nvidia_arch("10.0", ""), "blackwell");
	assert_string_equal(agent_nvidia_arch("12.0", ""), "blackwell");
	assert_string_equal(agent_nvidia_arch("6.0", ""), "pascal");
	/* no compute_cap column: by name (every name the fixtures hold) */
	assert_string_equal(agent_nvidia_arch("", "NVIDIA A100-SXM4-80GB"), "ampere");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA H200-141C"), "hopper");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA RTX A5000"), "ampere");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA RTX 4500 Ada Generation"), "ada");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA GeForce RTX 4080 SUPER"), "ada");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA GeForce RTX 3090"), "ampere");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA GeForce GTX 1660 SUPER"), "turing");
	assert_string_equal(agent_nvidia_arch("", "Tesla V100-SXM2-16GB"), "volta");
	assert_string_equal(agent_nvidia_arch("", "Tesla T4"), "turing");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA L4"), "ada");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA L40S"), "ada");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA B200"), "blackwell");
	assert_string_equal(agent_nvidia_arch("", "Quadro RTX 4000"), "turing");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA RTX PRO 6000 Blackwell Server Edition"), "blackwell");
	assert_string_equal(agent_nvidia_arch("", "NVIDIA H100L-2-24C"), "hopper");
	assert_string_equal(agent_nvidia_arch("", "Mystery Accelerator"), "");
	int max;
	assert_true(agent_nvlink_gbps("ampere", "8.0", "NVIDIA A100-SXM4-80GB", &max) == 50.0);
	assert_int_equal(max, 12);
	assert_true(agent_nvlink_gbps("ampere", "8.6", "NVIDIA GeForce RTX 3090", &max) == 28.125);
	assert_int_equal(max, 4);
	assert_true(agent_nvlink_gbps("hopper", "9.0", "", &max) == 50.0);
	assert_int_equal(max, 18);
	assert_true(agent_nvlink_gbps("blackwell", "10.0", "", &max) == 100.0);
	assert_true(agent_nvlink_gbps("ada", "8.9", "", &max) == 0.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nvswitch_a100_one_island),
		cmocka_unit_test(test_nvswitch_h100_900),
		cmocka_unit_test(test_dgx1_cube_mesh_is_one_island),
		cmocka_unit_test(test_pcie_only_box_has_no_islands),
		cmocka_unit_test(test_mig_and_missing_gpus_stay_out),
		cmocka_unit_test(test_amd_two_hives),
		cmocka_unit_test(test_no_topology_no_islands),
		cmocka_unit_test(test_nvidia_arch_table),
	};
	return cmocka_run_group_tests_name("agent_topology", tests, NULL, NULL);
}
