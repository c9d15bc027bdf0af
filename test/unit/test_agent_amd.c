/* rocminfo and rocm-smi parsers on recorded outputs, and the gfx target tables. */
#include "test_agent_util.h"

#include "agent_parse.h"

TA_FIXTURE_PARSER(rocminfo, struct rocm_info, rocm_parse_rocminfo)

static void test_rocminfo_mi210_4gpu(void **state)
{
	(void)state;
	char err[256];
	struct rocm_info *ri = rocminfo("amd/mi210-4gpu.rocminfo.txt", 0, err);
	assert_string_equal(ri->driver, "6.10.5");
	assert_int_equal(ri->n, 4);   /* the CPU agent is not a GPU */
	for (int i = 0; i < 4; i++) {
		assert_string_equal(ri->gpu[i].gfx, "gfx90a");
		assert_string_equal(ri->gpu[i].marketing, "AMD Instinct MI210");
		assert_int_equal(ri->gpu[i].node, i + 1);
		assert_int_equal(ri->gpu[i].chip_id, 0x740f);
		/* the pasted output lost agent 4's "Pool Info:" line; the pools still count */
		assert_int_equal(ri->gpu[i].vram_mib, 67092480 / 1024);
	}
	assert_string_equal(ri->gpu[0].uuid, "GPU-29273e62ca00396c");
	assert_string_equal(ri->gpu[0].pci_bus, "0000:e3:00.0");   /* BDFID 58112 */
	assert_string_equal(ri->gpu[2].pci_bus, "0000:03:00.0");   /* BDFID 768 */
	assert_string_equal(ri->gpu[3].uuid, "GPU-3644c2b4f8c805bb");
	free(ri);
}

static void test_rocminfo_mi250x_and_mi300x(void **state)
{
	(void)state;
	char err[256];
	struct rocm_info *ri = rocminfo("amd/mi250x-1gcd.rocminfo.txt", 0, err);
	assert_string_equal(ri->driver, "");   /* "ROCk module is loaded": no version */
	assert_int_equal(ri->n, 1);           /* four CPU agents, one GCD */
	assert_string_equal(ri->gpu[0].marketing, "AMD Instinct MI250X");
	assert_string_equal(ri->gpu[0].gfx, "gfx90a");
	assert_int_equal(ri->gpu[0].node, 4);
	assert_string_equal(ri->gpu[0].pci_bus, "0000:d1:00.0");
	assert_int_equal(ri->gpu[0].vram_mib, 65520);
	free(ri);

	ri = rocminfo("amd/mi300x-vf-1gpu.rocminfo.txt", 0, err);
	assert_string_equal(ri->driver, "6.16.13");
	assert_int_equal(ri->n, 1);
	assert_string_equal(ri->gpu[0].marketing, "AMD Instinct MI300X VF");
	assert_string_equal(ri->gpu[0].gfx, "gfx942");
	assert_string_equal(ri->gpu[0].pci_bus, "0000:83:00.0");
	assert_int_equal(ri->gpu[0].vram_mib, 196288);   /* amd-smi on that host: 196288 MB */
	assert_int_equal(ri->gpu[0].chip_id, 0x74b5);
	free(ri);
}

static void test_rocminfo_broken(void **state)
{
	(void)state;
	char err[256];
	struct rocm_info *ri = rocminfo("broken/mi210.rocminfo-truncated.txt", -1, err);
	assert_non_null(strstr(err, "cut short"));
	free(ri);
	ri = rocminfo("broken/garbage-html.txt", -1, err);
	free(ri);
	ri = rocminfo("broken/garbage-binary.bin", -1, err);
	free(ri);
	/* what rocminfo says when the driver is not there (text of ROCm's own message) */
	ri = calloc(1, sizeof(*ri));
	assert_int_equal(rocm_parse_rocminfo("ROCk module is NOT loaded, possibly no GPU devices\n", ri, err,
					     sizeof(err)), -1);
	assert_non_null(strstr(err, "NOT loaded"));
	free(ri);
}

TA_FIXTURE_PARSER(smi, struct rocm_smi, rocm_parse_smi)

static void test_smi_json_consumer_and_instinct(void **state)
{
	(void)state;
	char err[256];
	struct rocm_smi *s = smi("amd/radeon-rx7900xt.smi.json", 0, err);
	assert_int_equal(s->n, 1);
	assert_string_equal(s->card[0].series, "Radeon RX 7900 XT");
	assert_string_equal(s->card[0].gfx, "gfx1100");
	assert_true(s->card[0].vram_bytes == 21458059264ULL);
	assert_int_equal(s->card[0].node_id, 1);
	free(s);

	s = smi("amd/mi250x-1card.productname.json", 0, err);
	assert_int_equal(s->n, 1);
	assert_string_equal(s->card[0].series, "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2");
	assert_string_equal(s->card[0].gfx, "gfx90a");   /* rocm-smi printed "gfx9010" */
	assert_string_equal(s->card[0].model, "0x7408");
	free(s);
}

static void test_smi_text_8gpu(void **state)
{
	(void)state;
	char err[256];
	struct rocm_smi *s = smi("amd/mi308x-8gpu.meminfo.txt", 0, err);
	assert_int_equal(s->n, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(s->card[i].card, i);
		assert_true(s->card[i].vram_bytes == 206141652992ULL);
	}
	free(s);
}

static void test_smi_broken(void **state)
{
	(void)state;
	char err[256];
	struct rocm_smi *s = smi("broken/garbage-truncated.json", -1, err);
	assert_non_null(strstr(err, "JSON"));
	free(s);
	s = smi("broken/garbage-html.txt", -1, err);
	free(s);
	s = smi("broken/garbage-binary.bin", -1, err);
	free(s);
}

TA_FIXTURE_PARSER(topo, struct agent_topo, rocm_parse_topo)

static void test_topo_xgmi_8gpu(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("amd/mi308x-8gpu.showtopo.txt", 0, err);
	assert_int_equal(t->n, 8);
	for (int a = 0; a < 8; a++) {
		for (int b = 0; b < 8; b++)
			assert_int_equal(t->type[a][b], a == b ? AGENT_LINK_SELF : AGENT_LINK_XGMI);
	}
	free(t);
}

static void test_topo_two_hives_and_pcie(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("amd/two-hives-8gpu.showtopo.txt", 0, err);
	assert_int_equal(t->n, 8);
	assert_int_equal(t->type[0][3], AGENT_LINK_XGMI);
	assert_int_equal(t->type[0][4], AGENT_LINK_PCIE);
	assert_int_equal(t->type[5][7], AGENT_LINK_XGMI);
	assert_int_equal(t->type[7][2], AGENT_LINK_PCIE);
	free(t);
	t = topo("amd/pcie-4gpu.showtopo.txt", 0, err);
	assert_int_equal(t->n, 4);
	assert_int_equal(t->type[1][2], AGENT_LINK_PCIE);
	assert_string_equal(t->code[1][2], "PCIE");
	free(t);
}

static void test_topo_json_form(void **state)
{
	(void)state;
	/* the JSON form's keys, as rocm-smi --showtopotype --json names them (shape, not a recording) */
	const char *json = "{\"system\": {"
			   "\"(Topology) Link type between DRM devices 0 and 1\": \"XGMI\","
			   "\"(Topology) Link type between DRM devices 0 and 2\": \"PCIE\","
			   "\"(Topology) Link type between DRM devices 1 and 2\": \"PCIE\"}}";
	char err[256];
	struct agent_topo *t = calloc(1, sizeof(*t));
	assert_int_equal(rocm_parse_topo(json, t, err, sizeof(err)), 0);
	assert_int_equal(t->n, 3);
	assert_int_equal(t->type[1][0], AGENT_LINK_XGMI);
	assert_int_equal(t->type[2][1], AGENT_LINK_PCIE);
	assert_int_equal(t->type[2][2], AGENT_LINK_SELF);
	assert_int_equal(rocm_parse_topo("{\"system\": {\"(Topology) Link type between DRM devices 0 and 1\": "
					 "\"WARP\"}}", t, err, sizeof(err)), -1);
	free(t);
}

static void test_topo_broken(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("broken/mi308x.showtopo-truncated.txt", -1, err);
	free(t);
	t = topo("broken/garbage-truncated.json", -1, err);
	free(t);
	/* deliberately cut after the fourth row of the link type matrix */
	char *s = ta_read("amd/two-hives-8gpu.showtopo.txt");
	char *lt = strstr(s, "Link Type between two GPUs");
	char *cut = strstr(lt, "GPU4   PCIE");
	*cut = '\0';
	t = calloc(1, sizeof(*t));
	assert_int_equal(rocm_parse_topo(s, t, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "4 rows for 8"));
	free(s);
	free(t);
}

static void test_gfx_targets(void **state)
{
	(void)state;
	char g[24];
	assert_true(agent_amd_gfx("gfx90a", g, sizeof(g)));
	assert_string_equal(g, "gfx90a");
	assert_true(agent_amd_gfx("gfx90a:sramecc+:xnack-", g, sizeof(g)));
	assert_string_equal(g, "gfx90a");
	assert_true(agent_amd_gfx("gfx9010", g, sizeof(g)));
	assert_string_equal(g, "gfx90a");
	assert_true(agent_amd_gfx("gfx9402", g, sizeof(g)));
	assert_string_equal(g, "gfx942");
	assert_true(agent_amd_gfx("gfx11000", g, sizeof(g)));
	assert_string_equal(g, "gfx1100");
	assert_true(agent_amd_gfx("gfx1030", g, sizeof(g)));
	assert_string_equal(g, "gfx1030");
	assert_true(agent_amd_gfx("GFX942", g, sizeof(g)));
	assert_string_equal(g, "gfx942");
	assert_false(agent_amd_gfx("AMD EPYC 7A53 64-Core Processor", g, sizeof(g)));
	assert_false(agent_amd_gfx("gfx", g, sizeof(g)));
	assert_false(agent_amd_gfx("gfx9-4-generic", g, sizeof(g)));
	assert_string_equal(agent_amd_family("gfx942"), "cdna3");
	assert_string_equal(agent_amd_family("gfx90a"), "cdna2");
	assert_string_equal(agent_amd_family("gfx1100"), "rdna3");
	assert_true(agent_xgmi_gbps("gfx942", "AMD Instinct MI300X") == 896.0);
	assert_true(agent_xgmi_gbps("gfx90a", "AMD Instinct MI210") == 300.0);
	assert_true(agent_xgmi_gbps("gfx90a", "AMD Instinct MI250X") == 400.0);
	assert_true(agent_xgmi_gbps("gfx1100", "Radeon RX 7900 XT") == 0.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rocminfo_mi210_4gpu),
		cmocka_unit_test(test_rocminfo_mi250x_and_mi300x),
		cmocka_unit_test(test_rocminfo_broken),
		cmocka_unit_test(test_smi_json_consumer_and_instinct),
		cmocka_unit_test(test_smi_text_8gpu),
		cmocka_unit_test(test_smi_broken),
		cmocka_unit_test(test_topo_xgmi_8gpu),
		cmocka_unit_test(test_topo_two_hives_and_pcie),
		cmocka_unit_test(test_topo_json_form),
		cmocka_unit_test(test_topo_broken),
		cmocka_unit_test(test_gfx_targets),
	};
	return cmocka_run_group_tests_name("agent_amd", tests, NULL, NULL);
}
