/* clinfo and xpu-smi parsers on recorded outputs, and the Intel architecture table. */
#include "test_agent_util.h"

#include "agent_parse.h"

TA_FIXTURE_PARSER(cl, struct clinfo_out, clinfo_parse)

static void test_clinfo_arc_a770(void **state)
{
	(void)state;
	char err[256];
	/* "clinfo | grep" as posted, one leading blank lost in the paste */
	struct clinfo_out *c = cl("intel/arc-a770-rebar-off.clinfo-grep.txt", 0, err);
	assert_int_equal(c->n, 1);
	assert_string_equal(c->dev[0].name, "Intel(R) Graphics [0x56a0]");
	assert_string_equal(c->dev[0].driver, "22.49.25018.23");
	assert_true(c->dev[0].global_mem == 255012864ULL);   /* resizable BAR off: 243 MiB */
	assert_int_equal(c->dev[0].pci_device_id, 0x56a0);
	free(c);

	c = cl("intel/arc-a770.clinfo-d.txt", 0, err);
	assert_int_equal(c->n, 1);
	assert_string_equal(c->dev[0].name, "Intel(R) Arc(TM) A770 Graphics");
	assert_string_equal(c->dev[0].platform, "Intel(R) OpenCL HD Graphics");
	assert_string_equal(c->dev[0].vendor, "Intel(R) Corporation");
	assert_string_equal(c->dev[0].uuid, "8680a056-0800-0000-0300-000000000000");
	assert_string_equal(c->dev[0].driver, "23.05.25593.18");
	assert_true(c->dev[0].global_mem == 0);   /* the post stops before the memory lines */
	free(c);
}

static void test_clinfo_flex_and_integrated(void **state)
{
	(void)state;
	char err[256];
	struct clinfo_out *c = cl("intel/flex140-openshift.clinfo-truncated.txt", 0, err);
	assert_int_equal(c->n, 1);
	assert_string_equal(c->dev[0].name, "Intel(R) Data Center GPU Flex Series 140 [0x56c1]");
	assert_string_equal(c->dev[0].driver, "22.43.24595.35");
	assert_int_equal(c->dev[0].pci_device_id, 0x56c1);
	free(c);

	c = cl("intel/gen9-igpu.clinfo-excerpt.txt", 0, err);
	assert_int_equal(c->n, 1);
	assert_int_equal(c->dev[0].is_gpu, 1);
	assert_int_equal(c->dev[0].available, 1);
	assert_true(agent_intel_integrated(c->dev[0].name, agent_intel_arch(c->dev[0].name, 0)));
	free(c);
}

static void test_clinfo_broken(void **state)
{
	(void)state;
	char err[256];
	struct clinfo_out *c = cl("broken/garbage-html.txt", -1, err);
	free(c);
	c = cl("broken/garbage-binary.bin", -1, err);
	free(c);
	/* no platforms at all is no GPUs, not an error (clinfo's own wording) */
	c = calloc(1, sizeof(*c));
	assert_int_equal(clinfo_parse("Number of platforms                               0\n", c, err,
				      sizeof(err)), 0);
	assert_int_equal(c->n, 0);
	free(c);
}

TA_FIXTURE_PARSER(xs, struct xpusmi_out, xpusmi_parse_discovery)

static void test_xpusmi_forms(void **state)
{
	(void)state;
	char err[256];
	struct xpusmi_out *x = xs("intel/pvc-1gpu.xpu-discovery.json", 0, err);
	assert_int_equal(x->n, 1);
	assert_int_equal(x->dev[0].id, 0);
	assert_string_equal(x->dev[0].name, "Intel(R) Graphics [0x020a]");
	assert_string_equal(x->dev[0].uuid, "00000000-0000-0000-0000-020a00008086");
	assert_string_equal(x->dev[0].pci_bus, "0000:4d:00.0");
	assert_int_equal(x->dev[0].pci_device_id, 0x20a);
	free(x);

	x = xs("intel/pvc-1gpu.xpu-discovery.txt", 0, err);
	assert_int_equal(x->n, 1);
	assert_string_equal(x->dev[0].pci_bus, "0000:4d:00.0");
	assert_string_equal(x->dev[0].uuid, "00000000-0000-0000-0000-020a00008086");
	free(x);

	x = xs("intel/pvc-1gpu.xpu-discovery-d0.txt", 0, err);
	assert_int_equal(x->n, 1);
	assert_true(x->dev[0].mem_bytes == 32768ULL * 1048576ULL);
	assert_string_equal(x->dev[0].driver, "16929133");
	free(x);
}

static void test_xpusmi_broken(void **state)
{
	(void)state;
	char err[256];
	struct xpusmi_out *x = xs("broken/garbage-html.txt", -1, err);
	free(x);
	x = xs("broken/garbage-truncated.json", -1, err);
	free(x);
	/* the JSON of another xpu-smi subcommand is not a device list */
	x = calloc(1, sizeof(*x));
	assert_int_equal(xpusmi_parse_discovery("{\"device_level\": []}", x, err, sizeof(err)), -1);
	free(x);
}

static void test_intel_arch_table(void **state)
{
	(void)state;
	assert_string_equal(agent_intel_arch("Intel(R) Data Center GPU Max 1550", 0), "xe-hpc");
	assert_string_equal(agent_intel_arch("Intel(R) Graphics [0x0bd5]", 0), "xe-hpc");
	assert_string_equal(agent_intel_arch("Intel(R) Data Center GPU Flex Series 140 [0x56c1]", 0), "xe-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Data Center GPU Flex 170", 0), "xe-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Arc(TM) A770 Graphics", 0), "xe-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Graphics [0x56a0]", 0), "xe-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Arc(TM) Pro B60 Graphics", 0), "xe2-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Arc(TM) B580 Graphics", 0), "xe2-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Graphics", 0xe211), "xe2-hpg");
	assert_string_equal(agent_intel_arch("Intel(R) Graphics [0x020a]", 0), "xe-hp");
	assert_string_equal(agent_intel_arch("Intel(R) Iris(R) Xe Graphics", 0), "xe-lp");
	assert_string_equal(agent_intel_arch("Something Else", 0), "");
	assert_true(agent_intel_integrated("Intel(R) UHD Graphics 750", ""));
	assert_false(agent_intel_integrated("Intel(R) Arc(TM) A770 Graphics", "xe-hpg"));
	assert_int_equal(agent_pci_id_in_name("Intel(R) Graphics [0x56a0]"), 0x56a0);
	assert_int_equal(agent_pci_id_in_name("Intel(R) Graphics [0x56"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clinfo_arc_a770),
		cmocka_unit_test(test_clinfo_flex_and_integrated),
		cmocka_unit_test(test_clinfo_broken),
		cmocka_unit_test(test_xpusmi_forms),
		cmocka_unit_test(test_xpusmi_broken),
		cmocka_unit_test(test_intel_arch_table),
	};
	return cmocka_run_group_tests_name("agent_intel", tests, NULL, NULL);
}
