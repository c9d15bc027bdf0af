/*
 * AMD detector: rocminfo (the GPU agents, in ROCR_VISIBLE_DEVICES order,
 * gfx target, UUID, driver) and rocm-smi (product name, VRAM, PCI bus,
 * JSON form) plus rocm-smi --showtopo (XGMI islands).
 */
#include "agent.h"
#include "agent_parse.h"
#include "detect.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct amd_work {
	struct rocm_info ri;
	struct rocm_smi smi;
	bool have_ri, have_smi;
};

/* rocminfo's "GPU-5012f9bd2c780b" and rocm-smi's "0x5012f9bd2c780b" name the same GPU. */
static bool same_unique_id(const char *uuid, const char *unique)
{
	if (!uuid[0] || !unique[0])
		return false;
	const char *a = strncmp(uuid, "GPU-", 4) ? uuid : uuid + 4;
	const char *b = strncasecmp(unique, "0x", 2) ? unique : unique + 2;
	while (*a == '0')
		a++;
	while (*b == '0')
		b++;
	return *a && !strcasecmp(a, b);
}

static const struct rocm_card *match_card(const struct amd_work *w, int k)
{
	const struct rocm_agent *a = &w->ri.gpu[k];
	for (int i = 0; i < w->smi.n; i++) {
		if (same_unique_id(a->uuid, w->smi.card[i].unique_id))
			return &w->smi.card[i];
	}
	if (w->smi.n == w->ri.n)
		return &w->smi.card[k];   /* same count: same order (both follow the KFD nodes) */
	return NULL;
}

static void fill_from_card(struct agent_gpu *g, const struct rocm_card *c, const char *driver)
{
	if (!g->model[0])
		snprintf(g->model, sizeof(g->model), "%s", c->series[0] ? c->series : c->device_name);
	if (!g->arch[0])
		snprintf(g->arch, sizeof(g->arch), "%s", c->gfx);
	if (c->vram_bytes)
		g->memory_mib = (uint32_t)(c->vram_bytes / (1024 * 1024));
	if (c->pci_bus[0])
		snprintf(g->pci_bus, sizeof(g->pci_bus), "%s", c->pci_bus);
	if (!g->uuid[0] && c->unique_id[0]) {
		const char *hex = strncasecmp(c->unique_id, "0x", 2) ? c->unique_id : c->unique_id + 2;
		snprintf(g->uuid, sizeof(g->uuid), "GPU-%s", hex);
		for (char *p = g->uuid + 4; *p; p++)
			*p = (char)tolower((unsigned char)*p);
	}
	if (!g->driver[0] && driver[0])
		snprintf(g->driver, sizeof(g->driver), "%s", driver);
}

static int parse_rocminfo(const char *out, void *work, char *err, size_t errlen)
{
	return rocm_parse_rocminfo(out, &((struct amd_work *)work)->ri, err, errlen);
}

static int parse_smi(const char *out, void *work, char *err, size_t errlen)
{
	return rocm_parse_smi(out, &((struct amd_work *)work)->smi, err, errlen);
}

/* rocminfo's agents, completed from rocm-smi's cards (rocm-smi's alone when rocminfo sees none); then XGMI islands. */
static int merge(const struct toolrun_opts *opts, void *work, const struct detect_seen *seen,
		 struct agent_vendor_result *vr, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct amd_work *w = work;
	w->have_ri = seen->parsed[0];
	w->have_smi = seen->parsed[1];
	char perr[256];
	char *out;
	if (w->have_ri && !w->ri.n && w->have_smi && w->smi.n) {
		agent_note(vr, "rocminfo sees no GPU agent, rocm-smi sees %d cards", w->smi.n);
		w->have_ri = false;
	}
	if (w->have_ri) {
		if (w->have_smi && w->smi.n && w->smi.n != w->ri.n)
			agent_note(vr, "rocminfo lists %d GPUs, rocm-smi %d", w->ri.n, w->smi.n);
		for (int k = 0; k < w->ri.n; k++) {
			const struct rocm_agent *a = &w->ri.gpu[k];
			struct agent_gpu g;
			agent_gpu_init(&g, GPU_VENDOR_AMD, k);
			g.health = GPU_HEALTHY;
			g.memory_mib = a->vram_mib;
			snprintf(g.uuid, sizeof(g.uuid), "%s", a->uuid);
			snprintf(g.model, sizeof(g.model), "%s", a->marketing);
			snprintf(g.arch, sizeof(g.arch), "%s", a->gfx);
			snprintf(g.driver, sizeof(g.driver), "%s", w->ri.driver);
			snprintf(g.pci_bus, sizeof(g.pci_bus), "%s", a->pci_bus);
			const struct rocm_card *c = w->have_smi ? match_card(w, k) : NULL;
			if (c)
				fill_from_card(&g, c, w->smi.driver);
			if (!g.memory_mib) {
				g.health = GPU_HEALTH_UNKNOWN;
				snprintf(g.health_reason, sizeof(g.health_reason), "memory size not reported");
			}
			vr->gpu[vr->ngpu++] = g;
		}
	} else {
		for (int k = 0; k < w->smi.n; k++) {
			struct agent_gpu g;
			agent_gpu_init(&g, GPU_VENDOR_AMD, k);
			g.health = GPU_HEALTH_UNKNOWN;
			snprintf(g.health_reason, sizeof(g.health_reason), "not seen by rocminfo");
			fill_from_card(&g, &w->smi.card[k], w->smi.driver);
			vr->gpu[vr->ngpu++] = g;
		}
	}

	if (vr->ngpu >= 2 && seen->ran[1]) {
		static const char *const topo_argv[] = { "rocm-smi", "--showtopo", "--json", NULL };
		char terr[300];
		int trc = toolrun_capture(opts, topo_argv, &out, terr, sizeof(terr));
		if (trc < 0) {
			agent_note(vr, "topology unknown: %s", terr);
		} else if (trc > 0) {
			if (rocm_parse_topo(out, &vr->topo, perr, sizeof(perr)))
				agent_note(vr, "topology unknown: %s", perr);
			else if (vr->topo.n != vr->ngpu)
				agent_note(vr, "topology has %d GPUs, the inventory %d; not used", vr->topo.n,
					   vr->ngpu);
			else
				vr->have_topo = true;
		}
		free(out);
	}
	return AGENT_DETECT_OK;
}

/* XGMI: the generation's rate, whatever the links (the tool gives no count). */
static double member_gbps(const struct agent_gpu *g, int links)
{
	(void)links;
	double bw = agent_xgmi_gbps(g->arch, g->model);
	return bw > 0 ? bw : 50.0;   /* unknown generation: one Infinity Fabric link */
}

static const char *const ri_argv[] = { "rocminfo", NULL };
static const char *const smi_argv[] = { "rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showuniqueid",
					"--showbus", "--showdriverversion", "--json", NULL };

const struct detect_vendor detect_amd = {
	.vendor = GPU_VENDOR_AMD,
	.work_size = sizeof(struct amd_work),
	.ntools = 2,
	.tool = { { .argv = ri_argv, .parse = parse_rocminfo }, { .argv = smi_argv, .parse = parse_smi } },
	.merge = merge,
	.fast_link = AGENT_LINK_XGMI,
	.island_prefix = "xgmi",
	.member_gbps = member_gbps,
};

int agent_detect_amd(const struct toolrun_opts *opts, struct agent_vendor_result *vr, char *err, size_t errlen)
{
	return detect_run(&detect_amd, opts, vr, err, errlen);
}
