/*
 * NVIDIA detector: nvidia-smi --query-gpu (inventory and health fields),
 * nvidia-smi -L (UUIDs, MIG devices), plain nvidia-smi (MIG memory, only
 * when MIG is on) and nvidia-smi topo -m (NVLink islands).
 */
#include "agent.h"
#include "agent_parse.h"
#include "detect.h"

#include "strnum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The full query; drivers that do not know a field make us fall back to the short one. */
static const char fields_full[] =
	"index,uuid,name,memory.total,driver_version,pci.bus_id,compute_cap,mig.mode.current,"
	"ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,"
	"remapped_rows.failure";
static const char fields_min[] = "index,uuid,name,memory.total,driver_version,pci.bus_id";

/* MiB per "GB" of a MIG profile name when the table gives no exact size (see docs). */
#define MIG_MIB_PER_PROFILE_GB 972

struct nv_work {
	struct nvsmi_query q;
	struct nvsmi_list l;
	struct nvsmi_mig_table mt;
};

static bool said(const struct toolrun_result *res, const char *what)
{
	return (res->out && strstr(res->out, what)) || strstr(res->err, what);
}

/* Health from the query's health columns; reason filled when not Healthy. */
static enum gpu_health row_health(const struct nvsmi_row *r, char *why, size_t len)
{
	if (r->fault[0]) {
		snprintf(why, len, "nvidia-smi reports %s", r->fault);
		return GPU_UNHEALTHY;
	}
	if (r->ecc_uncorrected > 0) {
		snprintf(why, len, "%lld uncorrected ECC errors since the driver loaded",
			 (long long)r->ecc_uncorrected);
		return GPU_UNHEALTHY;
	}
	if (r->remap_failure == NVSMI_YES) {
		snprintf(why, len, "row remapping failed");
		return GPU_UNHEALTHY;
	}
	if (r->remap_pending == NVSMI_YES) {
		snprintf(why, len, "row remapping pending, GPU reset needed");
		return GPU_UNHEALTHY;
	}
	if (r->retired_pending == NVSMI_YES) {
		snprintf(why, len, "page retirement pending, GPU reset needed");
		return GPU_UNHEALTHY;
	}
	if (!r->have_memory) {
		snprintf(why, len, "memory size not reported");
		return GPU_HEALTH_UNKNOWN;
	}
	return GPU_HEALTHY;
}

static const struct nvsmi_list_gpu *list_find(const struct nvsmi_list *l, int index)
{
	for (int i = 0; i < l->ngpu; i++) {
		if (l->gpu[i].index == index)
			return &l->gpu[i];
	}
	return NULL;
}

/* "3g.40gb" -> 40 * MIG_MIB_PER_PROFILE_GB; 0 when the name has no size. */
static uint32_t profile_mib(const char *profile)
{
	const char *dot = strchr(profile, '.');
	if (!dot)
		return 0;
	char num[8];
	size_t n = 0;
	for (const char *p = dot + 1; *p >= '0' && *p <= '9' && n + 1 < sizeof(num); p++)
		num[n++] = *p;
	num[n] = '\0';
	int gb;
	if (!n || !strnum_int(num, 1, 4096, &gb))
		return 0;
	return (uint32_t)gb * MIG_MIB_PER_PROFILE_GB;
}

static uint32_t mig_table_mib(const struct nvsmi_mig_table *t, int gpu, int dev)
{
	for (int i = 0; i < t->n; i++) {
		if (t->m[i].gpu == gpu && t->m[i].dev == dev)
			return t->m[i].total_mib;
	}
	return 0;
}

static int add_gpu(struct agent_vendor_result *vr, const struct agent_gpu *g)
{
	if (vr->ngpu >= AGENT_MAX_GPUS) {
		agent_note(vr, "more than %d devices, the rest left out", AGENT_MAX_GPUS);
		return -1;
	}
	vr->gpu[vr->ngpu++] = *g;
	return 0;
}

/* Runs the query (with the fallback); fills w->q. AGENT_DETECT_* result. */
static int do_query(const struct toolrun_opts *opts, struct agent_vendor_result *vr, struct nv_work *w,
		    char *err, size_t errlen)
{
	const char *fields = fields_full;
	char qarg[sizeof(fields_full) + 16];
	/* At most two attempts: only the first goes on to the short list. */
	for (int attempt = 0;; attempt++) {
		snprintf(qarg, sizeof(qarg), "--query-gpu=%s", fields);
		const char *argv[] = { "nvidia-smi", qarg, "--format=csv,nounits", NULL };
		struct toolrun_result res;
		if (toolrun_run(opts, argv, &res)) {
			snprintf(err, errlen, "nvidia-smi: out of memory");
			return AGENT_DETECT_FAILED;
		}
		if (res.status == TOOLRUN_NOT_FOUND) {
			toolrun_result_release(&res);
			return AGENT_DETECT_ABSENT;
		}
		if (attempt == 0 && res.status == TOOLRUN_EXIT_NONZERO &&
		    said(&res, "is not a valid field to query")) {
			agent_note(vr, "driver does not know every health field; queried the short list");
			toolrun_result_release(&res);
			fields = fields_min;
			continue;
		}
		char perr[256];
		int prc = -1;
		if (res.status == TOOLRUN_OK || res.status == TOOLRUN_EXIT_NONZERO)
			prc = nvsmi_parse_query(res.out, NULL, &w->q, perr, sizeof(perr));
		if (res.status == TOOLRUN_OK && prc == 0) {
			toolrun_result_release(&res);
			return AGENT_DETECT_OK;
		}
		if (res.status == TOOLRUN_EXIT_NONZERO && said(&res, "No devices were found")) {
			/* the driver is there and sees no GPU: none to publish, not a failure */
			memset(&w->q, 0, sizeof(w->q));
			toolrun_result_release(&res);
			return AGENT_DETECT_OK;
		}
		if (res.status == TOOLRUN_EXIT_NONZERO && prc == 0 && w->q.nrow > 0) {
			char what[300];
			toolrun_describe(&res, "nvidia-smi", what, sizeof(what));
			agent_note(vr, "%s (the rows it printed are used)", what);
			toolrun_result_release(&res);
			return AGENT_DETECT_OK;
		}
		if (res.status == TOOLRUN_OK)
			snprintf(err, errlen, "nvidia-smi --query-gpu printed output the agent cannot use: %s", perr);
		else
			toolrun_describe(&res, "nvidia-smi", err, errlen);
		toolrun_result_release(&res);
		return AGENT_DETECT_FAILED;
	}
}

/* The query as the skeleton's first tool: 1 parsed, 0 nvidia-smi not installed, -1 failed. */
static int run_query(const struct toolrun_opts *opts, struct agent_vendor_result *vr, void *work, char *err,
		     size_t errlen)
{
	struct nv_work *w = work;
	int rc = do_query(opts, vr, w, err, errlen);
	if (rc == AGENT_DETECT_ABSENT)
		return 0;
	if (rc != AGENT_DETECT_OK)
		return -1;
	for (int i = 0; i < w->q.nlost; i++)
		agent_note(vr, "GPU %s (left out)", w->q.lost[i]);
	return 1;
}

/* -L: UUIDs when the query had none, and the MIG devices */
static int parse_list(const char *out, void *work, char *err, size_t errlen)
{
	struct nv_work *w = work;
	return nvsmi_parse_list(out, &w->l, err, errlen);
}

/* Optional output: parse failures become notes. Returns the tool's output or NULL. */
static char *run_optional(const struct toolrun_opts *opts, const char *const argv[],
			  struct agent_vendor_result *vr, const char *what)
{
	struct toolrun_result res;
	if (toolrun_run(opts, argv, &res))
		return NULL;
	if (res.status != TOOLRUN_OK) {
		char d[300];
		toolrun_describe(&res, "nvidia-smi", d, sizeof(d));
		agent_note(vr, "%s: %s", what, d);
		toolrun_result_release(&res);
		return NULL;
	}
	return res.out;   /* ownership to the caller */
}

/* Plain nvidia-smi, only when a GPU is in MIG mode: the MIG devices' exact memory. */
static void read_mig_table(const struct toolrun_opts *opts, struct nv_work *w, struct agent_vendor_result *vr)
{
	bool any_mig = false;
	for (int i = 0; i < w->q.nrow; i++)
		any_mig |= w->q.row[i].mig == NVSMI_YES;
	if (!any_mig)
		return;
	static const char *const smi_argv[] = { "nvidia-smi", NULL };
	char *out = run_optional(opts, smi_argv, vr, "nvidia-smi (MIG table)");
	char perr[256];
	if (out && nvsmi_parse_mig_table(out, &w->mt, perr, sizeof(perr))) {
		agent_note(vr, "MIG table: %s", perr);
		memset(&w->mt, 0, sizeof(w->mt));
	}
	free(out);
}

/* topo -m, when there is something to connect: the NVLink matrix. */
static void read_topology(const struct toolrun_opts *opts, const struct nv_work *w, struct agent_vendor_result *vr)
{
	if (w->q.nrow < 2)
		return;
	static const char *const topo_argv[] = { "nvidia-smi", "topo", "-m", NULL };
	char *out = run_optional(opts, topo_argv, vr, "nvidia-smi topo -m");
	char perr[256];
	if (out) {
		if (nvsmi_parse_topo(out, &vr->topo, perr, sizeof(perr)))
			agent_note(vr, "topology unknown: %s", perr);
		else if (vr->topo.n != w->q.nrow)
			agent_note(vr, "topology has %d GPUs, the query %d; not used", vr->topo.n, w->q.nrow);
		else
			vr->have_topo = true;
	}
	free(out);
}

/* The devices from the query and the list: MIG instances replace their GPU; then NVLink islands. */
static int merge(const struct toolrun_opts *opts, void *work, const struct detect_seen *seen,
		 struct agent_vendor_result *vr, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct nv_work *w = work;
	if (!seen->parsed[1])
		memset(&w->l, 0, sizeof(w->l));   /* a list that did not parse is not used, even in part */
	read_mig_table(opts, w, vr);

	for (int i = 0; i < w->q.nrow; i++) {
		const struct nvsmi_row *r = &w->q.row[i];
		const struct nvsmi_list_gpu *lg = list_find(&w->l, r->index);
		struct agent_gpu g;
		agent_gpu_init(&g, GPU_VENDOR_NVIDIA, r->index);
		g.memory_mib = r->memory_mib;
		snprintf(g.uuid, sizeof(g.uuid), "%s", r->uuid[0] ? r->uuid : lg ? lg->uuid : "");
		snprintf(g.model, sizeof(g.model), "%s", r->name[0] ? r->name : lg ? lg->name : "");
		snprintf(g.driver, sizeof(g.driver), "%s", r->driver);
		snprintf(g.pci_bus, sizeof(g.pci_bus), "%s", r->pci_bus);
		snprintf(g.compute_cap, sizeof(g.compute_cap), "%s", r->compute_cap);
		snprintf(g.arch, sizeof(g.arch), "%s", agent_nvidia_arch(r->compute_cap, g.model));
		g.health = row_health(r, g.health_reason, sizeof(g.health_reason));
		if (r->mig != NVSMI_YES) {
			add_gpu(vr, &g);
			continue;
		}
		/* MIG mode: the instances are the devices, not the GPU */
		if (!lg || !lg->nmig) {
			agent_note(vr, "GPU %d is in MIG mode but has no MIG devices", r->index);
			continue;
		}
		bool guessed = false;
		for (int k = 0; k < lg->nmig; k++) {
			const struct nvsmi_mig *m = &lg->mig[k];
			struct agent_gpu mg = g;
			mg.mig_index = m->dev;
			snprintf(mg.uuid, sizeof(mg.uuid), "%s", m->uuid);
			snprintf(mg.mig_profile, sizeof(mg.mig_profile), "%s", m->profile);
			mg.memory_mib = mig_table_mib(&w->mt, r->index, m->dev);
			if (!mg.memory_mib) {
				mg.memory_mib = profile_mib(m->profile);
				guessed = true;
			}
			add_gpu(vr, &mg);
		}
		if (guessed)
			agent_note(vr, "GPU %d: MIG memory taken from the profile names", r->index);
	}

	read_topology(opts, w, vr);
	return AGENT_DETECT_OK;
}

/* NVLink: the bonded links to the rest of the island, at the architecture's rate per link. */
static double member_gbps(const struct agent_gpu *g, int links)
{
	int max_links;
	double per = agent_nvlink_gbps(g->arch, g->compute_cap, g->model, &max_links);
	if (per <= 0)
		per = 25.0;   /* NVLink seen on a part we have no table row for: the NVLink 1/2 rate */
	if (max_links > 0 && links > max_links)
		links = max_links;
	return links * per;
}

static const char *const list_argv[] = { "nvidia-smi", "-L", NULL };

const struct detect_vendor detect_nvidia = {
	.vendor = GPU_VENDOR_NVIDIA,
	.work_size = sizeof(struct nv_work),
	.ntools = 2,
	.tool = { { .run = run_query, .required = true }, { .argv = list_argv, .parse = parse_list, .what = "nvidia-smi -L" } },
	.merge = merge,
	.fast_link = AGENT_LINK_NVLINK,
	.island_prefix = "nvlink",
	.member_gbps = member_gbps,
};

int agent_detect_nvidia(const struct toolrun_opts *opts, struct agent_vendor_result *vr, char *err, size_t errlen)
{
	return detect_run(&detect_nvidia, opts, vr, err, errlen);
}
