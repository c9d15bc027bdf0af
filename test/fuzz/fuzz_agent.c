/*
 * libFuzzer target for the node agent's parsers: every input is handed to
 * every parser (nvidia-smi query/-L/MIG table/topo, rocminfo, rocm-smi
 * key/value and topology, clinfo, xpu-smi), then to the island computation
 * with whatever matrix came out. A parser may reject the input; it must not
 * crash, read out of bounds, leak or loop.
 *
 * Seeds: test/fuzz/corpus-agent (the recorded tool outputs of
 * test/fixtures/agent). Build and run: make fuzz (docs/testing.md).
 */
#include "agent_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void islands_over(enum gpu_vendor v, const struct agent_topo *t, struct agent_vendor_result *vr)
{
	agent_vendor_result_init(vr, v);
	vr->topo = *t;
	vr->have_topo = t->n > 0;
	for (int i = 0; i < t->n && i < AGENT_MAX_GPUS; i++) {
		struct agent_gpu *g = &vr->gpu[vr->ngpu++];
		g->vendor = v;
		g->index = i;
		g->mig_index = -1;
	}
	agent_compute_islands(vr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	char err[256];

	struct nvsmi_query *q = malloc(sizeof(*q));
	struct nvsmi_list *l = malloc(sizeof(*l));
	struct nvsmi_mig_table *mt = malloc(sizeof(*mt));
	struct agent_topo *t = malloc(sizeof(*t));
	struct rocm_info *ri = malloc(sizeof(*ri));
	struct rocm_smi *rs = malloc(sizeof(*rs));
	struct clinfo_out *cl = malloc(sizeof(*cl));
	struct xpusmi_out *xs = malloc(sizeof(*xs));
	struct agent_vendor_result *vr = malloc(sizeof(*vr));
	if (q && l && mt && t && ri && rs && cl && xs && vr) {
		nvsmi_parse_query(text, NULL, q, err, sizeof(err));
		nvsmi_parse_query(text, "index,uuid,name,memory.total,driver_version,pci.bus_id", q, err,
				  sizeof(err));
		nvsmi_parse_list(text, l, err, sizeof(err));
		nvsmi_parse_mig_table(text, mt, err, sizeof(err));
		if (nvsmi_parse_topo(text, t, err, sizeof(err)) == 0)
			islands_over(GPU_VENDOR_NVIDIA, t, vr);
		rocm_parse_rocminfo(text, ri, err, sizeof(err));
		rocm_parse_smi(text, rs, err, sizeof(err));
		if (rocm_parse_topo(text, t, err, sizeof(err)) == 0)
			islands_over(GPU_VENDOR_AMD, t, vr);
		clinfo_parse(text, cl, err, sizeof(err));
		xpusmi_parse_discovery(text, xs, err, sizeof(err));
		char gfx[24];
		agent_amd_gfx(text, gfx, sizeof(gfx));
		agent_nvidia_arch(text, text);
		agent_intel_arch(text, 0);
	}
	free(q);
	free(l);
	free(mt);
	free(t);
	free(ri);
	free(rs);
	free(cl);
	free(xs);
	free(vr);
	free(text);
	return 0;
}
