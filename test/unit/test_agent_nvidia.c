/* nvidia-smi parsers on recorded outputs: --query-gpu CSV, -L, the MIG table, topo -m. */
#include "test_agent_util.h"

#include "agent_parse.h"

/* The recorded output with its header line (no fields list). */
static int parse_query(const char *text, struct nvsmi_query *q, char *err, size_t errlen)
{
	return nvsmi_parse_query(text, NULL, q, err, errlen);
}

TA_FIXTURE_PARSER(query, struct nvsmi_query, parse_query)

static void test_query_h100_full_capture(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_query *q = query("nvidia/h100-80gb-1gpu.query-full.csv", 0, err);
	assert_int_equal(q->ncol, 212);
	assert_int_equal(q->nrow, 1);
	const struct nvsmi_row *r = &q->row[0];
	assert_int_equal(r->index, 0);
	assert_string_equal(r->name, "NVIDIA H100 80GB HBM3");
	assert_string_equal(r->uuid, "GPU-00000000-0000-0000-0000-000000000000");
	assert_true(r->have_memory);
	assert_int_equal(r->memory_mib, 81559);
	assert_string_equal(r->driver, "590.48.01");
	assert_string_equal(r->pci_bus, "00000000:00:09.0");
	assert_string_equal(r->compute_cap, "9.0");
	assert_int_equal(r->mig, NVSMI_NO);
	assert_int_equal(r->ecc_uncorrected, 0);
	assert_int_equal(r->remap_pending, NVSMI_NO);
	assert_int_equal(r->remap_failure, NVSMI_NO);
	assert_int_equal(r->retired_pending, NVSMI_UNKNOWN);   /* [N/A] on Hopper */
	assert_string_equal(r->fault, "");
	free(q);
}

static void test_query_h100_mig_mode(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_query *q = query("nvidia/h100-mig.query-full.csv", 0, err);
	assert_int_equal(q->nrow, 1);
	assert_int_equal(q->row[0].mig, NVSMI_YES);
	/* in MIG mode the ECC and remap counters read [N/A] */
	assert_int_equal(q->row[0].remap_pending, NVSMI_UNKNOWN);
	free(q);
}

static void test_query_8gpu_without_uuid(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_query *q = query("nvidia/a100-sxm4-80gb-8gpu.query.csv", 0, err);
	assert_int_equal(q->nrow, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(q->row[i].index, i);
		assert_string_equal(q->row[i].name, "NVIDIA A100-SXM4-80GB");
		assert_int_equal(q->row[i].memory_mib, 81920);
		assert_string_equal(q->row[i].uuid, "");
	}
	free(q);
}

static void test_query_several_models(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_query *q = query("nvidia/rtx-a5000-rtx4500ada-workstation.query.csv", 0, err);
	assert_int_equal(q->nrow, 2);
	assert_string_equal(q->row[0].name, "NVIDIA RTX A5000");
	assert_int_equal(q->row[0].memory_mib, 24564);
	assert_string_equal(q->row[1].name, "NVIDIA RTX 4500 Ada Generation");
	assert_string_equal(q->row[1].driver, "610.57.04");
	assert_string_equal(q->row[1].uuid, "GPU-fbe2dd5d-3644-5c37-3179-8ad50079b7d4");
	free(q);

	q = query("nvidia/h200-141c-vgpu-4gpu.query.csv", 0, err);
	assert_int_equal(q->nrow, 4);
	assert_string_equal(q->row[3].name, "NVIDIA H200-141C");
	assert_int_equal(q->row[3].memory_mib, 144384);
	free(q);

	q = query("nvidia/rtx4080s-rtx3090.query.csv", 0, err);
	assert_int_equal(q->nrow, 2);
	assert_string_equal(q->row[1].name, "NVIDIA GeForce RTX 3090");
	free(q);

	q = query("nvidia/gtx1660s.query.csv", 0, err);
	assert_int_equal(q->nrow, 1);
	assert_int_equal(q->row[0].mig, NVSMI_UNKNOWN);   /* [N/A] */
	assert_int_equal(q->row[0].memory_mib, 6144);
	free(q);
}

static void test_query_noheader_with_fields(void **state)
{
	(void)state;
	/* the recorded output without its header line is what --format=csv,noheader prints */
	char *t = ta_read("nvidia/rtx-a5000-rtx4500ada-workstation.query.csv");
	const char *body = strchr(t, '\n') + 1;
	struct nvsmi_query *q = calloc(1, sizeof(*q));
	char err[256];
	assert_int_equal(nvsmi_parse_query(body, "index,name,uuid,memory.total,driver_version,power.limit",
					   q, err, sizeof(err)), 0);
	assert_int_equal(q->nrow, 2);
	assert_int_equal(q->row[1].memory_mib, 24570);
	/* without the list there is nothing to go by */
	assert_int_equal(nvsmi_parse_query(body, NULL, q, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "header"));
	free(q);
	free(t);
}

/*
 * A deliberately edited copy of the recorded H100 output: the cell of
 * column col (found by name in the header) set to val.
 */
static char *set_cell(const char *rel, const char *col, const char *val)
{
	char *t = ta_read(rel);
	char *nl = strchr(t, '\n');
	assert_non_null(nl);
	int idx = -1, k = 0;
	for (char *c = t; c < nl; k++) {
		size_t n = strcspn(c, ",\n");
		char name[128];
		snprintf(name, sizeof(name), "%.*s", (int)n, c);
		char *br = strchr(name, '[');
		if (br)
			*br = '\0';
		char *e = name + strlen(name);
		while (e > name && e[-1] == ' ')
			*--e = '\0';
		if (!strcmp(name + strspn(name, " "), col))
			idx = k;
		c += n;
		if (*c == ',')
			c++;
	}
	assert_true(idx >= 0);
	char *row = nl + 1;
	char *c = row;
	for (int i = 0; i < idx; i++)
		c = strchr(c, ',') + 1;
	size_t n = strcspn(c, ",\n");
	size_t pre = (size_t)(c - t);
	char *r = malloc(strlen(t) + strlen(val) + 4);
	assert_non_null(r);
	snprintf(r, strlen(t) + strlen(val) + 4, "%.*s %s%s", (int)pre, t, val, c + n);
	free(t);
	return r;
}

static void test_query_health_cells(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_query *q = calloc(1, sizeof(*q));
	const char *h100 = "nvidia/h100-80gb-1gpu.query-full.csv";
	char *t = set_cell(h100, "memory.total", "[GPU is lost]");
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), 0);
	assert_string_equal(q->row[0].fault, "[GPU is lost]");
	assert_false(q->row[0].have_memory);
	free(t);

	t = set_cell(h100, "ecc.errors.uncorrected.volatile.total", "3");
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), 0);
	assert_int_equal(q->row[0].ecc_uncorrected, 3);
	free(t);

	t = set_cell(h100, "remapped_rows.pending", "Yes");
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), 0);
	assert_int_equal(q->row[0].remap_pending, NVSMI_YES);
	free(t);

	t = set_cell(h100, "memory.total", "eighty gigs");
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "memory.total"));
	free(t);

	/* a fault in a column the agent does not use is not its business */
	t = set_cell(h100, "fan.speed", "[Unknown Error]");
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), 0);
	assert_string_equal(q->row[0].fault, "");
	free(t);
	free(q);
}

static void test_query_broken_outputs(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_query *q;
	q = query("broken/a100-8gpu.query-truncated.csv", -1, err);
	assert_non_null(strstr(err, "cut short"));
	free(q);
	q = query("broken/garbage-html.txt", -1, err);
	free(q);
	q = query("broken/garbage-binary.bin", -1, err);
	assert_string_equal(err, "output is not text");
	free(q);
	q = query("broken/garbage-csv.csv", -1, err);
	assert_non_null(strstr(err, "fields"));
	free(q);
	q = query("broken/nvidia-smi-no-driver.txt", -1, err);
	assert_non_null(strstr(err, "couldn't communicate with the NVIDIA driver"));
	free(q);
	q = query("broken/nvidia-smi-bad-field.txt", -1, err);
	assert_non_null(strstr(err, "compute_cap"));
	free(q);
	/* a lost GPU is not a parse error: it is reported, and has no row */
	q = query("broken/nvidia-smi-gpu-lost.txt", 0, err);
	assert_int_equal(q->nrow, 0);
	assert_int_equal(q->nlost, 1);
	assert_non_null(strstr(q->lost[0], "0000:02:00.0: GPU is lost"));
	free(q);
	/* a deliberately garbled index */
	char *t = ta_read("nvidia/a100-sxm4-80gb-8gpu.query.csv");
	t = ta_replace(t, "\n3, NVIDIA", "\nthree, NVIDIA");
	q = calloc(1, sizeof(*q));
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "index"));
	free(t);
	/* duplicated rows */
	t = ta_read("nvidia/a100-sxm4-80gb-8gpu.query.csv");
	t = ta_replace(t, "\n7, NVIDIA", "\n6, NVIDIA");
	assert_int_equal(nvsmi_parse_query(t, NULL, q, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "twice"));
	free(t);
	free(q);
}

static void test_list_plain_and_mig(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_list *l = calloc(1, sizeof(*l));
	char *t = ta_read("nvidia/a100-sxm4-80gb-8gpu.list.txt");
	assert_int_equal(nvsmi_parse_list(t, l, err, sizeof(err)), 0);
	assert_int_equal(l->ngpu, 8);
	assert_string_equal(l->gpu[7].uuid, "GPU-2545335d-3baa-188c-36b5-f645e39e1923");
	assert_string_equal(l->gpu[7].name, "NVIDIA A100-SXM4-80GB");
	assert_int_equal(l->gpu[7].nmig, 0);
	free(t);

	t = ta_read("nvidia/h100-mig.list.txt");
	assert_int_equal(nvsmi_parse_list(t, l, err, sizeof(err)), 0);
	assert_int_equal(l->ngpu, 1);
	assert_int_equal(l->gpu[0].nmig, 4);
	assert_string_equal(l->gpu[0].mig[0].profile, "3g.40gb");
	assert_string_equal(l->gpu[0].mig[1].profile, "2g.20gb");
	assert_int_equal(l->gpu[0].mig[3].dev, 3);
	assert_string_equal(l->gpu[0].mig[3].uuid, "MIG-00000003-0000-0000-0000-000000000003");
	free(t);

	/* MIG on GPU 0 only, the other three whole */
	t = ta_read("nvidia/a100-mig-telegraf.list.txt");
	assert_int_equal(nvsmi_parse_list(t, l, err, sizeof(err)), 0);
	assert_int_equal(l->ngpu, 4);
	assert_int_equal(l->gpu[0].nmig, 4);
	assert_string_equal(l->gpu[0].mig[2].uuid, "MIG-f00d722c-f4e1-52c9-aa31-750441ae1bfe");
	assert_string_equal(l->gpu[0].mig[2].profile, "1g.20gb");
	assert_int_equal(l->gpu[3].nmig, 0);
	assert_int_equal(l->gpu[3].index, 3);
	free(t);

	t = ta_read("broken/garbage-html.txt");
	assert_int_equal(nvsmi_parse_list(t, l, err, sizeof(err)), -1);
	free(t);
	t = ta_read("broken/nvidia-smi-no-driver.txt");
	assert_int_equal(nvsmi_parse_list(t, l, err, sizeof(err)), -1);
	free(t);
	free(l);
}

static void test_mig_table(void **state)
{
	(void)state;
	char err[256];
	struct nvsmi_mig_table *m = calloc(1, sizeof(*m));
	char *t = ta_read("nvidia/h100-mig.smi.txt");
	assert_int_equal(nvsmi_parse_mig_table(t, m, err, sizeof(err)), 0);
	assert_int_equal(m->n, 4);
	assert_int_equal(m->m[0].gi, 2);
	assert_int_equal(m->m[0].total_mib, 40448);
	assert_int_equal(m->m[1].total_mib, 20096);
	assert_int_equal(m->m[3].dev, 3);
	assert_int_equal(m->m[3].gi, 10);
	assert_int_equal(m->m[3].total_mib, 9984);
	free(t);
	/* output without the table */
	t = ta_read("nvidia/a100-sxm4-80gb-8gpu.list.txt");
	assert_int_equal(nvsmi_parse_mig_table(t, m, err, sizeof(err)), 0);
	assert_int_equal(m->n, 0);
	free(t);
	/* a deliberately garbled memory cell */
	t = ta_read("nvidia/h100-mig.smi.txt");
	t = ta_replace(t, "/ 40448MiB", "/ lots");
	assert_int_equal(nvsmi_parse_mig_table(t, m, err, sizeof(err)), -1);
	free(t);
	free(m);
}

TA_FIXTURE_PARSER(topo, struct agent_topo, nvsmi_parse_topo)

static void test_topo_nvlink_8gpu(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("nvidia/a100-sxm4-80gb-8gpu.topo.txt", 0, err);
	assert_int_equal(t->n, 8);   /* the NIC rows and columns are not GPUs */
	for (int a = 0; a < 8; a++) {
		for (int b = 0; b < 8; b++) {
			assert_int_equal(t->type[a][b], a == b ? AGENT_LINK_SELF : AGENT_LINK_NVLINK);
			assert_int_equal(t->links[a][b], a == b ? 0 : 12);
		}
	}
	assert_string_equal(t->code[3][4], "NV12");
	free(t);
	t = topo("nvidia/h100-8gpu-nv18.topo.txt", 0, err);
	assert_int_equal(t->n, 8);
	assert_int_equal(t->links[7][0], 18);
	free(t);
}

static void test_topo_dgx1_hybrid_cube_mesh(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("nvidia/v100-sxm2-8gpu-dgx1.topo.txt", 0, err);
	assert_int_equal(t->n, 8);
	assert_int_equal(t->type[0][1], AGENT_LINK_NVLINK);
	assert_int_equal(t->links[0][1], 1);
	assert_int_equal(t->links[0][3], 2);
	assert_int_equal(t->type[0][5], AGENT_LINK_PCIE);
	assert_string_equal(t->code[0][5], "SYS");
	assert_int_equal(t->links[2][6], 1);
	free(t);
}

static void test_topo_pcie_only_and_single(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("nvidia/l4-8gpu-pcie.topo.txt", 0, err);
	assert_int_equal(t->n, 8);
	for (int a = 0; a < 8; a++) {
		for (int b = 0; b < 8; b++) {
			if (a != b)
				assert_int_equal(t->type[a][b], AGENT_LINK_PCIE);
		}
	}
	assert_string_equal(t->code[0][1], "PHB");
	assert_string_equal(t->code[0][4], "SYS");
	free(t);
	t = topo("nvidia/h100-80gb-1gpu.topo.txt", 0, err);
	assert_int_equal(t->n, 1);
	free(t);
}

static void test_topo_broken(void **state)
{
	(void)state;
	char err[256];
	struct agent_topo *t = topo("broken/a100-8gpu.topo-truncated.txt", -1, err);
	free(t);
	t = topo("broken/garbage-html.txt", -1, err);
	assert_non_null(strstr(err, "no GPU matrix"));
	free(t);
	/* deliberately cut after whole lines: rows missing */
	char *s = ta_read("nvidia/a100-sxm4-80gb-8gpu.topo.txt");
	char *cut = strstr(s, "GPU5    NV12");
	assert_non_null(cut);
	*cut = '\0';
	t = calloc(1, sizeof(*t));
	assert_int_equal(nvsmi_parse_topo(s, t, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "5 GPU rows for 8"));
	free(s);
	/* a deliberately unknown cell */
	s = ta_read("nvidia/v100-sxm2-8gpu-dgx1.topo.txt");
	s = ta_replace(s, "GPU2    NV1     NV2", "GPU2    NV1     ZZZ");
	assert_int_equal(nvsmi_parse_topo(s, t, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ZZZ"));
	free(s);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_h100_full_capture),
		cmocka_unit_test(test_query_h100_mig_mode),
		cmocka_unit_test(test_query_8gpu_without_uuid),
		cmocka_unit_test(test_query_several_models),
		cmocka_unit_test(test_query_noheader_with_fields),
		cmocka_unit_test(test_query_health_cells),
		cmocka_unit_test(test_query_broken_outputs),
		cmocka_unit_test(test_list_plain_and_mig),
		cmocka_unit_test(test_mig_table),
		cmocka_unit_test(test_topo_nvlink_8gpu),
		cmocka_unit_test(test_topo_dgx1_hybrid_cube_mesh),
		cmocka_unit_test(test_topo_pcie_only_and_single),
		cmocka_unit_test(test_topo_broken),
	};
	return cmocka_run_group_tests_name("agent_nvidia", tests, NULL, NULL);
}
