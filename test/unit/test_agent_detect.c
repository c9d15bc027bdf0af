/*
 * The detectors end to end, with fake vendor tools (shell scripts that
 * print the recorded outputs), and the keep-the-last-good-status rule.
 */
#include "test_agent_util.h"

#include "agent.h"
#include "log.h"

#include <time.h>

/* "cat '<abs fixture>'" or "exit 1" when rel is NULL. */
static const char *cat_or_fail(char *buf, size_t len, const char *rel)
{
	if (!rel) {
		snprintf(buf, len, "exit 1");
		return buf;
	}
	char p[1024];
	snprintf(buf, len, "cat '%s'", ta_abs(p, sizeof(p), rel));
	return buf;
}

/* An nvidia-smi that answers the four invocations the detector makes. */
static void fake_nvidia(const char *dir, const char *query, const char *list, const char *topo,
			const char *smi)
{
	char q[1200], l[1200], t[1200], s[1200];
	ta_script(dir, "nvidia-smi",
		  "case \"$1\" in\n"
		  "--query-gpu=*) %s ;;\n"
		  "-L) %s ;;\n"
		  "topo) %s ;;\n"
		  "'') %s ;;\n"
		  "*) echo \"unexpected $*\" >&2; exit 2 ;;\n"
		  "esac\n",
		  cat_or_fail(q, sizeof(q), query), cat_or_fail(l, sizeof(l), list),
		  cat_or_fail(t, sizeof(t), topo), cat_or_fail(s, sizeof(s), smi));
}

/* The 8x A100 NVLink box: query, -L and topo -m (no MIG). */
static void fake_nvidia_a100(const char *dir)
{
	fake_nvidia(dir, "nvidia/a100-sxm4-80gb-8gpu.query.csv", "nvidia/a100-sxm4-80gb-8gpu.list.txt",
		    "nvidia/a100-sxm4-80gb-8gpu.topo.txt", NULL);
}

static struct toolrun_opts opts_for(const char *dir)
{
	struct toolrun_opts o = { .tools_dir = dir, .timeout_ms = 5000 };
	return o;
}

static void test_nvidia_8gpu_nvlink(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	fake_nvidia_a100(dir);
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512];
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 8);
	assert_true(vr->have_topo);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(vr->gpu[i].index, i);
		assert_string_equal(vr->gpu[i].arch, "ampere");
		assert_int_equal(vr->gpu[i].health, GPU_HEALTHY);
		assert_string_equal(vr->gpu[i].island, "nvlink-0");
		assert_true(vr->gpu[i].bandwidth_gbps == 600.0);
	}
	/* the query had no uuid column: -L filled it in */
	assert_string_equal(vr->gpu[4].uuid, "GPU-f229271e-77e5-4684-3134-38d470efe467");
	free(vr);
	ta_rmdir(dir);
}

static void test_nvidia_mig(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	fake_nvidia(dir, "nvidia/h100-mig.query-full.csv", "nvidia/h100-mig.list.txt", "nvidia/h100-mig.topo.txt",
		    "nvidia/h100-mig.smi.txt");
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512];
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	/* the GPU is published as its four instances only */
	assert_int_equal(vr->ngpu, 4);
	static const char *const prof[] = { "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb" };
	static const uint32_t mib[] = { 40448, 20096, 9984, 9984 };
	for (int k = 0; k < 4; k++) {
		assert_int_equal(vr->gpu[k].index, 0);
		assert_int_equal(vr->gpu[k].mig_index, k);
		assert_string_equal(vr->gpu[k].mig_profile, prof[k]);
		assert_int_equal(vr->gpu[k].memory_mib, mib[k]);
		assert_string_equal(vr->gpu[k].arch, "hopper");
		assert_string_equal(vr->gpu[k].model, "NVIDIA H100 80GB HBM3");
		assert_string_equal(vr->gpu[k].island, "");
	}
	assert_string_equal(vr->gpu[1].uuid, "MIG-00000001-0000-0000-0000-000000000001");
	free(vr);

	/* no MIG table: sizes from the profile names, and a note */
	fake_nvidia(dir, "nvidia/h100-mig.query-full.csv", "nvidia/h100-mig.list.txt", "nvidia/h100-mig.topo.txt",
		    NULL);
	vr = malloc(sizeof(*vr));
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->gpu[0].memory_mib, 40 * 972);
	assert_non_null(strstr(vr->note, "profile names"));
	free(vr);
	ta_rmdir(dir);
}

static void test_nvidia_old_driver_fallback(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	char bad[1024], good[1024];
	/* a driver that does not know compute_cap: the real message, exit 2 */
	ta_script(dir, "nvidia-smi",
		  "case \"$1\" in\n"
		  "*compute_cap*) cat '%s'; exit 2 ;;\n"
		  "--query-gpu=*) cat '%s' ;;\n"
		  "*) exit 1 ;;\n"
		  "esac\n",
		  ta_abs(bad, sizeof(bad), "broken/nvidia-smi-bad-field.txt"),
		  ta_abs(good, sizeof(good), "nvidia/rtx-a5000-rtx4500ada-workstation.query.csv"));
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512];
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 2);
	assert_string_equal(vr->gpu[0].arch, "ampere");
	assert_string_equal(vr->gpu[1].arch, "ada");
	assert_false(vr->have_topo);   /* topo -m failed: no islands, a note */
	assert_non_null(strstr(vr->note, "short list"));
	assert_non_null(strstr(vr->note, "topo -m"));
	free(vr);
	ta_rmdir(dir);
}

static void test_nvidia_failures(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512], p[1024];

	/* not installed: no GPUs, not an error */
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_ABSENT);

	/* driver not loaded */
	ta_script(dir, "nvidia-smi", "cat '%s'; exit 9\n", ta_abs(p, sizeof(p), "broken/nvidia-smi-no-driver.txt"));
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "exited with status 9"));
	assert_non_null(strstr(err, "couldn't communicate"));

	/* garbage with status 0 */
	ta_cat(dir, "nvidia-smi", "broken/garbage-html.txt");
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "cannot use"));

	/* cut short */
	ta_cat(dir, "nvidia-smi", "broken/a100-8gpu.query-truncated.csv");
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "cut short"));

	/* hangs: the timeout fires */
	ta_script(dir, "nvidia-smi", "sleep 30\n");
	o.timeout_ms = 300;
	time_t t0 = time(NULL);
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_true(time(NULL) - t0 < 5);
	assert_non_null(strstr(err, "timed out"));

	/* crashes */
	ta_script(dir, "nvidia-smi", "kill -SEGV $$\n");
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "signal 11"));

	/* a driver that sees no GPU (nvidia-smi's wording and status 6): none, not a failure */
	ta_script(dir, "nvidia-smi", "echo 'No devices were found'; exit 6\n");
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 0);

	/* a lost GPU, nothing else */
	ta_script(dir, "nvidia-smi", "cat '%s'; exit 15\n", ta_abs(p, sizeof(p), "broken/nvidia-smi-gpu-lost.txt"));
	assert_int_equal(agent_detect_nvidia(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "GPU is lost"));
	free(vr);
	ta_rmdir(dir);
}

static void test_amd_rocminfo_and_smi(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	char tp[1024];
	ta_cat(dir, "rocminfo", "amd/mi210-4gpu.rocminfo.txt");
	ta_script(dir, "rocm-smi",
		  "case \"$*\" in\n"
		  "*--showtopo*) cat '%s' ;;\n"
		  "*) echo '{}' ;;\n"
		  "esac\n",
		  ta_abs(tp, sizeof(tp), "amd/pcie-4gpu.showtopo.txt"));
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512];
	assert_int_equal(agent_detect_amd(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 4);
	assert_true(vr->have_topo);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(vr->gpu[i].index, i);
		assert_string_equal(vr->gpu[i].model, "AMD Instinct MI210");
		assert_string_equal(vr->gpu[i].arch, "gfx90a");
		assert_string_equal(vr->gpu[i].driver, "6.10.5");
		assert_int_equal(vr->gpu[i].memory_mib, 65520);
		assert_int_equal(vr->gpu[i].health, GPU_HEALTHY);
		assert_string_equal(vr->gpu[i].island, "");   /* PCIe only */
	}
	free(vr);
	ta_rmdir(dir);
}

static void test_amd_smi_only_xgmi(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	char mem[1024], tp[1024];
	ta_script(dir, "rocm-smi",
		  "case \"$*\" in\n"
		  "*--showtopo*) cat '%s' ;;\n"
		  "*) cat '%s' ;;\n"
		  "esac\n",
		  ta_abs(tp, sizeof(tp), "amd/mi308x-8gpu.showtopo.txt"),
		  ta_abs(mem, sizeof(mem), "amd/mi308x-8gpu.meminfo.txt"));
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512];
	assert_int_equal(agent_detect_amd(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(vr->gpu[i].memory_mib, 196592);
		assert_int_equal(vr->gpu[i].health, GPU_HEALTH_UNKNOWN);   /* rocminfo missing */
		assert_string_equal(vr->gpu[i].island, "xgmi-0");
	}
	free(vr);

	/* rocminfo present but broken, rocm-smi fine: a note, rocm-smi's view */
	ta_cat(dir, "rocminfo", "broken/mi210.rocminfo-truncated.txt");
	vr = malloc(sizeof(*vr));
	assert_int_equal(agent_detect_amd(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 8);
	assert_non_null(strstr(vr->note, "cut short"));
	free(vr);

	/* both broken */
	ta_cat(dir, "rocm-smi", "broken/garbage-truncated.json");
	vr = malloc(sizeof(*vr));
	assert_int_equal(agent_detect_amd(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "rocminfo"));
	assert_non_null(strstr(err, "rocm-smi"));
	free(vr);
	ta_rmdir(dir);
}

static void test_intel(void **state)
{
	(void)state;
	char *dir = ta_tmpdir();
	struct toolrun_opts o = opts_for(dir);
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	char err[512];
	assert_int_equal(agent_detect_intel(&o, vr, err, sizeof(err)), AGENT_DETECT_ABSENT);

	/* clinfo only: the Flex 140 whose memory lines the post cut off */
	ta_cat(dir, "clinfo", "intel/flex140-openshift.clinfo-truncated.txt");
	assert_int_equal(agent_detect_intel(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 1);
	assert_string_equal(vr->gpu[0].arch, "xe-hpg");
	assert_string_equal(vr->gpu[0].driver, "22.43.24595.35");
	assert_string_equal(vr->gpu[0].uuid, "86800000-c156-0000-0000-000000000000");
	assert_int_equal(vr->gpu[0].health, GPU_HEALTH_UNKNOWN);

	/* integrated graphics are left out */
	ta_cat(dir, "clinfo", "intel/gen9-igpu.clinfo-excerpt.txt");
	assert_int_equal(agent_detect_intel(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 0);
	assert_non_null(strstr(vr->note, "integrated"));

	/* xpu-smi with clinfo: xpu-smi's ids and PCI address, clinfo's memory */
	ta_cat(dir, "xpu-smi", "intel/pvc-1gpu.xpu-discovery.json");
	ta_cat(dir, "clinfo", "intel/arc-a770-rebar-off.clinfo-grep.txt");
	assert_int_equal(agent_detect_intel(&o, vr, err, sizeof(err)), AGENT_DETECT_OK);
	assert_int_equal(vr->ngpu, 1);
	assert_string_equal(vr->gpu[0].pci_bus, "0000:4d:00.0");
	assert_string_equal(vr->gpu[0].uuid, "00000000-0000-0000-0000-020a00008086");

	/* garbage from both */
	ta_cat(dir, "xpu-smi", "broken/garbage-html.txt");
	ta_cat(dir, "clinfo", "broken/garbage-binary.bin");
	assert_int_equal(agent_detect_intel(&o, vr, err, sizeof(err)), AGENT_DETECT_FAILED);
	assert_non_null(strstr(err, "clinfo"));
	free(vr);
	ta_rmdir(dir);
}

static void test_round_keeps_last_good(void **state)
{
	(void)state;
	log_setup(LOG_ERROR, false);
	char *dir = ta_tmpdir();
	fake_nvidia_a100(dir);
	struct toolrun_opts o = opts_for(dir);
	struct agent_state st;
	agent_state_init(&st);
	struct agent_node *node = malloc(sizeof(*node));

	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 0);
	assert_int_equal(node->ndev, 8);
	assert_int_equal(node->vstate[0], AGENT_V_OK);
	assert_int_equal(node->vstate[1], AGENT_V_ABSENT);

	/* nvidia-smi starts printing garbage: one error, the 8 GPUs stay */
	ta_cat(dir, "nvidia-smi", "broken/garbage-binary.bin");
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 1);
	assert_int_equal(node->ndev, 8);
	assert_int_equal(node->vstate[0], AGENT_V_STALE);
	assert_non_null(strstr(node->vmsg[0], "not text"));
	assert_string_equal(node->dev[3].g.island, "nvlink-0");

	/* and hangs */
	ta_script(dir, "nvidia-smi", "sleep 30\n");
	o.timeout_ms = 200;
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 1);
	assert_int_equal(node->ndev, 8);
	assert_non_null(strstr(node->vmsg[0], "timed out"));

	/* recovers */
	o.timeout_ms = 5000;
	fake_nvidia_a100(dir);
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 0);
	assert_int_equal(node->vstate[0], AGENT_V_OK);

	/* uninstalled: the vendor has no GPUs any more */
	ta_unlink(dir, "nvidia-smi");
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 0);
	assert_int_equal(node->ndev, 0);
	assert_int_equal(node->vstate[0], AGENT_V_ABSENT);

	/* failing from the start: nothing to keep */
	ta_script(dir, "nvidia-smi", "exit 3\n");
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 1);
	assert_int_equal(node->ndev, 0);
	assert_int_equal(node->vstate[0], AGENT_V_FAILED);
	assert_int_equal(st.rounds, 6);
	free(node);
	agent_state_release(&st);
	ta_rmdir(dir);
}

/* Lines of the file at path that contain what. */
static int count_lines(const char *path, const char *what)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[4096];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/* A tool that stays broken is logged once per streak, not once per round. */
static void test_round_logs_once_per_streak(void **state)
{
	(void)state;
	log_setup(LOG_INFO, false);
	char *dir = ta_tmpdir();
	char logpath[1100];
	snprintf(logpath, sizeof(logpath), "%s/log", dir);
	fflush(stderr);
	int saved = dup(2);
	FILE *lf = fopen(logpath, "w");
	assert_non_null(lf);
	assert_true(dup2(fileno(lf), 2) >= 0);

	fake_nvidia_a100(dir);
	struct toolrun_opts o = opts_for(dir);
	struct agent_state st;
	agent_state_init(&st);
	struct agent_node *node = malloc(sizeof(*node));
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 0);
	ta_cat(dir, "nvidia-smi", "broken/garbage-binary.bin");
	for (int i = 0; i < 4; i++)
		assert_int_equal(agent_detect_round(&o, &st, "n1", node), 1);
	ta_script(dir, "nvidia-smi", "exit 9\n");   /* another reason: one more line */
	for (int i = 0; i < 3; i++)
		assert_int_equal(agent_detect_round(&o, &st, "n1", node), 1);
	fake_nvidia_a100(dir);
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 0);
	assert_int_equal(agent_detect_round(&o, &st, "n1", node), 0);
	assert_int_equal(node->ndev, 8);

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fclose(lf);
	log_setup(LOG_ERROR, false);
	assert_int_equal(count_lines(logpath, "gpu detection failed"), 2);
	assert_int_equal(count_lines(logpath, "not text"), 1);
	assert_int_equal(count_lines(logpath, "exited with status 9"), 1);
	assert_int_equal(count_lines(logpath, "gpu detection recovered"), 1);
	unlink(logpath);
	free(node);
	agent_state_release(&st);
	ta_rmdir(dir);
}

static void test_round_mixed_vendors(void **state)
{
	(void)state;
	log_setup(LOG_ERROR, false);
	char *dir = ta_tmpdir();
	fake_nvidia(dir, "nvidia/h100-80gb-1gpu.query-full.csv", "nvidia/h100-80gb-1gpu.list.txt",
		    "nvidia/h100-80gb-1gpu.topo.txt", NULL);
	ta_cat(dir, "rocminfo", "amd/mi300x-vf-1gpu.rocminfo.txt");
	ta_cat(dir, "clinfo", "intel/arc-a770-rebar-off.clinfo-grep.txt");
	struct toolrun_opts o = opts_for(dir);
	struct agent_state st;
	agent_state_init(&st);
	struct agent_node *node = malloc(sizeof(*node));
	assert_int_equal(agent_detect_round(&o, &st, "mixed", node), 0);
	assert_int_equal(node->ndev, 3);
	assert_int_equal(node->dev[0].id, 0);
	assert_int_equal(node->dev[0].g.vendor, GPU_VENDOR_NVIDIA);
	assert_int_equal(node->dev[1].id, 100);
	assert_string_equal(node->dev[1].g.arch, "gfx942");
	assert_int_equal(node->dev[2].id, 200);
	assert_string_equal(node->dev[2].g.arch, "xe-hpg");
	free(node);
	agent_state_release(&st);
	ta_rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nvidia_8gpu_nvlink),
		cmocka_unit_test(test_nvidia_mig),
		cmocka_unit_test(test_nvidia_old_driver_fallback),
		cmocka_unit_test(test_nvidia_failures),
		cmocka_unit_test(test_amd_rocminfo_and_smi),
		cmocka_unit_test(test_amd_smi_only_xgmi),
		cmocka_unit_test(test_intel),
		cmocka_unit_test(test_round_keeps_last_good),
		cmocka_unit_test(test_round_logs_once_per_streak),
		cmocka_unit_test(test_round_mixed_vendors),
	};
	return cmocka_run_group_tests_name("agent_detect", tests, NULL, NULL);
}
