/*
 * Intel detector: clinfo (name, memory, driver; the OpenCL devices of the
 * Intel platforms) and xpu-smi discovery -j where installed (device ids in
 * Level Zero order, UUIDs, PCI addresses). Integrated graphics are left out.
 */
#include "agent.h"
#include "agent_parse.h"
#include "detect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct intel_work {
	struct clinfo_out cl;
	struct xpusmi_out xs;
	bool have_cl, have_xs;
};

/* An Intel GPU among clinfo's devices (any vendor's OpenCL platforms show up). */
static bool intel_gpu(const struct clinfo_dev *d)
{
	bool intel = strstr(d->vendor, "Intel") || strstr(d->name, "Intel") ||
		     (!d->vendor[0] && strstr(d->platform, "Intel"));
	if (!intel || d->is_gpu == 0)
		return false;
	if (d->is_gpu < 0 && !strstr(d->name, "Graphics") && !strstr(d->name, "GPU"))
		return false;
	/* the CPU and FPGA-emulation platforms */
	if (strstr(d->platform, "FPGA") || strstr(d->name, "Core(TM)") || strstr(d->name, "Xeon"))
		return false;
	return true;
}

/* A PCI address compared without the domain's leading zeros or case. */
static bool same_bus(const char *a, const char *b)
{
	if (!a[0] || !b[0])
		return false;
	size_t la = strlen(a), lb = strlen(b);
	size_t n = la < lb ? la : lb;
	return n >= 7 && !strcasecmp(a + la - n, b + lb - n);
}

static const struct clinfo_dev *cl_for(const struct intel_work *w, const struct xpusmi_dev *x, int k,
				       const int *cl_idx, int ncl)
{
	for (int i = 0; i < ncl; i++) {
		const struct clinfo_dev *d = &w->cl.dev[cl_idx[i]];
		if (same_bus(d->pci_bus, x->pci_bus))
			return d;
	}
	return k < ncl ? &w->cl.dev[cl_idx[k]] : NULL;
}

static void finish(struct agent_gpu *g, const struct clinfo_dev *d, bool seen_by_cl, unsigned devid)
{
	if (d) {
		if (!g->model[0] || strstr(g->model, "Graphics ["))
			snprintf(g->model, sizeof(g->model), "%s", d->name);
		if (!g->driver[0])
			snprintf(g->driver, sizeof(g->driver), "%s", d->driver);
		if (!g->uuid[0])
			snprintf(g->uuid, sizeof(g->uuid), "%s", d->uuid);
		if (!g->pci_bus[0])
			snprintf(g->pci_bus, sizeof(g->pci_bus), "%s", d->pci_bus);
		if (!g->memory_mib && d->global_mem)
			g->memory_mib = (uint32_t)(d->global_mem / (1024 * 1024));
		if (!devid)
			devid = d->pci_device_id;
	}
	snprintf(g->arch, sizeof(g->arch), "%s", agent_intel_arch(g->model, devid));
	g->health = GPU_HEALTHY;
	if (d && d->available == 0) {
		g->health = GPU_UNHEALTHY;
		snprintf(g->health_reason, sizeof(g->health_reason), "OpenCL reports the device unavailable");
	} else if (!seen_by_cl) {
		g->health = GPU_HEALTH_UNKNOWN;
		snprintf(g->health_reason, sizeof(g->health_reason), "not seen by clinfo");
	} else if (!g->memory_mib) {
		g->health = GPU_HEALTH_UNKNOWN;
		snprintf(g->health_reason, sizeof(g->health_reason), "memory size not reported");
	}
}

static int parse_clinfo(const char *out, void *work, char *err, size_t errlen)
{
	return clinfo_parse(out, &((struct intel_work *)work)->cl, err, errlen);
}

static int parse_xpusmi(const char *out, void *work, char *err, size_t errlen)
{
	return xpusmi_parse_discovery(out, &((struct intel_work *)work)->xs, err, errlen);
}

/* xpu-smi's devices completed from clinfo's (clinfo's alone without xpu-smi); integrated GPUs left out. */
static int merge(const struct toolrun_opts *opts, void *work, const struct detect_seen *seen,
		 struct agent_vendor_result *vr, char *err, size_t errlen)
{
	(void)opts;
	(void)err;
	(void)errlen;
	struct intel_work *w = work;
	w->have_cl = seen->parsed[0];
	w->have_xs = seen->parsed[1];
	/* clinfo's Intel GPUs, integrated ones left out */
	int cl_idx[AGENT_MAX_GPUS], ncl = 0, skipped = 0;
	for (int i = 0; w->have_cl && i < w->cl.n; i++) {
		const struct clinfo_dev *d = &w->cl.dev[i];
		if (!intel_gpu(d))
			continue;
		if (agent_intel_integrated(d->name, agent_intel_arch(d->name, d->pci_device_id)) ||
		    d->unified_mem == 1) {
			skipped++;
			continue;
		}
		cl_idx[ncl++] = i;
	}
	if (skipped)
		agent_note(vr, "%d integrated GPU(s) left out", skipped);

	if (w->have_xs && w->xs.n) {
		for (int k = 0; k < w->xs.n; k++) {
			const struct xpusmi_dev *x = &w->xs.dev[k];
			if (agent_intel_integrated(x->name, agent_intel_arch(x->name, x->pci_device_id)))
				continue;
			struct agent_gpu g;
			agent_gpu_init(&g, GPU_VENDOR_INTEL, x->id);
			snprintf(g.model, sizeof(g.model), "%s", x->name);
			snprintf(g.uuid, sizeof(g.uuid), "%s", x->uuid);
			snprintf(g.pci_bus, sizeof(g.pci_bus), "%s", x->pci_bus);
			snprintf(g.driver, sizeof(g.driver), "%s", x->driver);
			g.memory_mib = (uint32_t)(x->mem_bytes / (1024 * 1024));
			const struct clinfo_dev *d = w->have_cl ? cl_for(w, x, k, cl_idx, ncl) : NULL;
			finish(&g, d, d != NULL, x->pci_device_id);
			vr->gpu[vr->ngpu++] = g;
		}
	} else {
		for (int k = 0; k < ncl; k++) {
			const struct clinfo_dev *d = &w->cl.dev[cl_idx[k]];
			struct agent_gpu g;
			agent_gpu_init(&g, GPU_VENDOR_INTEL, k);
			finish(&g, d, true, d->pci_device_id);
			vr->gpu[vr->ngpu++] = g;
		}
	}
	return AGENT_DETECT_OK;
}

/* Xe Link: lanes to the rest of the island. */
static double member_gbps(const struct agent_gpu *g, int links)
{
	(void)g;
	return links * 13.6;     /* one Xe Link lane carries about 13.6 GB/s */
}

static const char *const cl_argv[] = { "clinfo", NULL };
static const char *const xs_argv[] = { "xpu-smi", "discovery", "-j", NULL };

const struct detect_vendor detect_intel = {
	.vendor = GPU_VENDOR_INTEL,
	.work_size = sizeof(struct intel_work),
	.ntools = 2,
	.tool = { { .argv = cl_argv, .parse = parse_clinfo }, { .argv = xs_argv, .parse = parse_xpusmi } },
	.merge = merge,
	.fast_link = AGENT_LINK_XELINK,
	.island_prefix = "xelink",
	.member_gbps = member_gbps,
};

int agent_detect_intel(const struct toolrun_opts *opts, struct agent_vendor_result *vr, char *err, size_t errlen)
{
	return detect_run(&detect_intel, opts, vr, err, errlen);
}
