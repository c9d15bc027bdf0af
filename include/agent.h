/*
 * agent: the node agent's model of what it found on this node, and the
 * steps from tool output to the published GpuNodeStatus.
 *
 *   tool output --(agent_parse.h, pure)--> per-vendor records
 *   detectors (detect_*.c) --> struct agent_vendor_result, one per vendor
 *   agent_compute_islands() --> island and bandwidth per GPU (pure)
 *   agent_node_build() --> struct agent_node: ids, islands, totals (pure)
 *   agent_gns_json() --> the GpuNodeStatus object the extender reads
 *
 * Everything here but the detectors and agent_detect() is pure: no I/O, no
 * globals. Errors go into a caller's buffer; nothing here exits.
 * docs/agent.md has the normalisation tables and the id, island and health
 * rules in prose.
 */
#ifndef GPU_AGENT_H
#define GPU_AGENT_H

#include "agent_toolrun.h"
#include "gpu.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The product's version (the VERSION file, through the Makefile), the extender's too. */
#ifndef GPU_VERSION
#define GPU_VERSION "dev"
#endif
#define AGENT_VERSION GPU_VERSION
#define AGENT_MAX_GPUS GPU_MAX_DEVICES   /* per vendor, and per node */
#define AGENT_MAX_MIG 8                  /* MIG instances per GPU (7 on A100/H100) */
#define AGENT_ERR_MAX 512
#define AGENT_NVENDOR VENDOR_COUNT       /* the vendor table's (vendor.h): slot = vendor - 1 */

/* How two GPUs of one vendor are connected. */
enum agent_link {
	AGENT_LINK_UNKNOWN = 0,
	AGENT_LINK_SELF,
	AGENT_LINK_PCIE,         /* any PCIe / host path (PIX, PXB, PHB, NODE, SYS, PCIE) */
	AGENT_LINK_NVLINK,       /* links = bonded NVLink count (NV#) */
	AGENT_LINK_XGMI,         /* AMD Infinity Fabric; links = 1 (the tool gives no count) */
	AGENT_LINK_XELINK,       /* Intel Xe Link; links = lane count when known */
};

/* The interconnect matrix of one vendor's GPUs, indexed by vendor index. */
struct agent_topo {
	int n;
	unsigned char type[AGENT_MAX_GPUS][AGENT_MAX_GPUS];   /* enum agent_link */
	unsigned char links[AGENT_MAX_GPUS][AGENT_MAX_GPUS];
	char code[AGENT_MAX_GPUS][AGENT_MAX_GPUS][6];         /* the tool's cell: "NV12", "PHB", "XGMI" */
};

/* One GPU, or one MIG instance, as a detector reports it (normalised). */
struct agent_gpu {
	enum gpu_vendor vendor;
	int index;               /* the vendor's ordinal (CUDA/ROCR/ZE); MIG: the parent's */
	int mig_index;           /* MIG device index within the parent, -1 for a whole GPU */
	enum gpu_health health;
	uint32_t memory_mib;
	double bandwidth_gbps;   /* set by agent_compute_islands() */
	char uuid[96];
	char model[64];
	char arch[24];           /* "hopper", "gfx90a", "xe-hpc", "" when unknown */
	char driver[32];
	char pci_bus[32];
	char compute_cap[8];     /* NVIDIA "9.0" */
	char mig_profile[24];    /* "3g.40gb" for a MIG instance */
	char health_reason[96];  /* why it is not Healthy */
	char island[48];         /* set by agent_compute_islands(); "" = none */
};

/* What one vendor's detector found. Large: allocate it, do not put it on the stack. */
struct agent_vendor_result {
	enum gpu_vendor vendor;
	int ngpu;
	struct agent_gpu gpu[AGENT_MAX_GPUS];   /* whole GPUs and MIG instances */
	bool have_topo;
	struct agent_topo topo;
	char note[AGENT_ERR_MAX];               /* non-fatal remarks, "; "-separated */
};

/* Adds a remark to vr->note (kept short; extra remarks are dropped). */
void agent_note(struct agent_vendor_result *vr, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Resets vr to "vendor v, nothing found". */
void agent_vendor_result_init(struct agent_vendor_result *vr, enum gpu_vendor v);
/* Resets g to whole GPU index of vendor v, every other field empty. */
void agent_gpu_init(struct agent_gpu *g, enum gpu_vendor v, int index);

/* ---- normalisation tables (arch.c) ---- */

/*
 * NVIDIA architecture from the compute capability ("9.0" -> "hopper"), else
 * from the product name ("NVIDIA RTX A5000" -> "ampere"). "" when unknown.
 */
const char *agent_nvidia_arch(const char *compute_cap, const char *name);
/*
 * NVLink speed of one link in GB/s (both directions together) for an
 * architecture, and the most links one GPU of it has. 0 when the
 * architecture is unknown or has no NVLink we know of.
 */
double agent_nvlink_gbps(const char *arch, const char *compute_cap, const char *name, int *max_links);
/*
 * AMD gfx target, normalised: "gfx90a:sramecc+:xnack-" -> "gfx90a",
 * rocm-smi's "gfx9010" -> "gfx90a", "gfx11000" -> "gfx1100". False when s
 * is not a gfx target.
 */
bool agent_amd_gfx(const char *s, char *out, size_t len);
/* A readable family for a gfx target ("gfx942" -> "cdna3"), "" if unknown. */
const char *agent_amd_family(const char *gfx);
/* Aggregate Infinity Fabric bandwidth of one GPU (GB/s) when it has XGMI peers. */
double agent_xgmi_gbps(const char *gfx, const char *model);
/*
 * Intel architecture from the device name or PCI device id (0 = unknown):
 * "xe-hpc" (Max / Ponte Vecchio), "xe-hpg" (Arc A, Flex), "xe2-hpg" (Arc B),
 * "xe-hp" (XeHP SDV), "xe-lp"/"gen9"... for integrated parts, "" unknown.
 */
const char *agent_intel_arch(const char *name, unsigned pci_device_id);
/* True for Intel integrated graphics, which the agent does not publish. */
bool agent_intel_integrated(const char *name, const char *arch);
/* The PCI device id inside a name like "Intel(R) Graphics [0x56a0]", or 0. */
unsigned agent_pci_id_in_name(const char *name);

/* ---- islands (islands.c) ---- */

/*
 * Groups the vendor's whole GPUs into islands: connected components of the
 * fast links in vr->topo (NVLink, XGMI, Xe Link). Each component of two or
 * more GPUs gets a name "<kind>-<k>" (k from 0, in order of its lowest
 * index) and every member gets that name and the island's bandwidth: the
 * smallest, over members, of min(links to island peers, the GPU's link
 * limit) x the per-link speed. GPUs with no fast link, and MIG instances,
 * get no island and 0 GB/s. Needs no topology (then nothing is grouped).
 * Returns the number of islands.
 */
int agent_compute_islands(struct agent_vendor_result *vr);

/* ---- the node (node.c) ---- */

enum agent_vstate {
	AGENT_V_ABSENT = 0,      /* the vendor's tools are not installed: no GPUs */
	AGENT_V_OK,              /* detected now */
	AGENT_V_FAILED,          /* tools failed and nothing was found before */
	AGENT_V_STALE,           /* tools failed; the last good result is kept */
};
const char *agent_vstate_name(enum agent_vstate s);

struct agent_device {
	int id;                  /* unique on the node (see docs/agent.md) */
	int parent_id;           /* MIG instance: the parent GPU's id; else -1 */
	struct agent_gpu g;
};

struct agent_island {
	char name[48];
	enum gpu_vendor vendor;
	double bandwidth_gbps;
	int nmember;
	int member[AGENT_MAX_GPUS];   /* device ids */
};

struct agent_node {
	char name[254];
	int ndev;
	struct agent_device dev[AGENT_MAX_GPUS];
	int nisland;
	struct agent_island island[GPU_MAX_ISLANDS];
	enum agent_vstate vstate[AGENT_NVENDOR];
	char vmsg[AGENT_NVENDOR][AGENT_ERR_MAX];
	const struct agent_vendor_result *vr[AGENT_NVENDOR];  /* borrowed, for links */
	int dropped;             /* devices beyond AGENT_MAX_GPUS that were left out */
	int share_slots;         /* set by the device plugin (status.shareSlots); 0 = none */
};

/*
 * Builds the node from up to three vendor results (NULL = none), in the
 * fixed order nvidia, amd, intel. Ids: a whole GPU's id is its vendor index
 * plus its vendor's offset; the first vendor present has offset 0 and each
 * later one starts at the next multiple of 100 above the highest id used so
 * far; a MIG instance k of GPU p gets 1000*(p+1)+k. Borrows the results
 * (node->vr) until the node is dropped. Pure.
 */
void agent_node_build(struct agent_node *node, const char *name,
		      const struct agent_vendor_result *const vr[AGENT_NVENDOR],
		      const enum agent_vstate vstate[AGENT_NVENDOR],
		      const char *const vmsg[AGENT_NVENDOR]);

/* Index into node->dev of the device with that id, or -1. */
int agent_node_find(const struct agent_node *node, int id);
/* How many of the node's devices are Healthy. */
int agent_node_healthy(const struct agent_node *node);

/* ---- node labels (node.c) ---- */

#define AGENT_LABEL_PREFIX "gpu.scheduling/"
#define AGENT_LABEL_VALUE_MAX 63      /* Kubernetes' limit on a label value */
#define AGENT_MAX_LABELS 16

struct agent_label {
	char key[64];
	char value[AGENT_LABEL_VALUE_MAX + 1];
};

struct agent_labels {
	int n;
	struct agent_label l[AGENT_MAX_LABELS];
};

/*
 * s as a valid Kubernetes label value: only [A-Za-z0-9._-], at most 63
 * characters, alphanumeric first and last; every run of other characters
 * becomes one '-' ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3",
 * "Intel(R) Arc(TM) A770" -> "Intel-R-Arc-TM-A770"). May be "" (valid).
 * Returns false when the value had to be cut short (it is still valid).
 */
bool agent_label_value(char *out, size_t len, const char *s);

/*
 * The node's labels, the one place they are computed: gpu.scheduling/
 * gpu.present, gpu.count, gpu.vendor, <vendor>.count, gpu.model,
 * gpu.architecture, gpu.memory-mib, gpu.fast-interconnect, gpu.mig (see
 * docs/agent.md). Values already pass agent_label_value(). Pure.
 */
void agent_node_label_set(const struct agent_node *node, struct agent_labels *out);
/* The same as "key=value" lines into buf. Returns the number of labels. */
int agent_node_labels(const struct agent_node *node, char *buf, size_t len);

/* The value of key in ls, or NULL. */
const char *agent_labels_get(const struct agent_labels *ls, const char *key);
/* Same keys with the same values (order does not matter). */
bool agent_labels_equal(const struct agent_labels *a, const struct agent_labels *b);
/*
 * Every key agent_node_label_set() can produce: the agent owns these on its
 * Node and removes the ones it no longer sets; other gpu.scheduling/ labels
 * (an operator's) are never touched. *keys points at a static array.
 */
int agent_label_managed_keys(const char *const **keys);
bool agent_label_managed(const char *key);

/* ---- GpuNodeStatus JSON (gns.c) ---- */

/*
 * The node as a GpuNodeStatus object (gpu.scheduling/v1), see
 * docs/agent.md for every field. timestamp is RFC 3339 or NULL (then
 * status.lastUpdated is left out, which keeps test output stable).
 * Returns a heap string the caller frees, or NULL when out of memory.
 */
char *agent_gns_json(const struct agent_node *node, const char *timestamp, bool pretty);

/* ---- detection (detect*.c): runs the tools ---- */

enum agent_detect_rc {
	AGENT_DETECT_FAILED = -1,
	AGENT_DETECT_OK = 0,
	AGENT_DETECT_ABSENT = 1,
};

/*
 * Each detector runs its vendor's tools (opts: tools dir, timeout, cap),
 * parses them and fills vr (normalised, islands computed). A missing tool
 * is AGENT_DETECT_ABSENT; a tool that fails, hangs or prints something
 * that does not parse is AGENT_DETECT_FAILED with one line in err.
 */
int agent_detect_nvidia(const struct toolrun_opts *opts, struct agent_vendor_result *vr,
			char *err, size_t errlen);
int agent_detect_amd(const struct toolrun_opts *opts, struct agent_vendor_result *vr,
		     char *err, size_t errlen);
int agent_detect_intel(const struct toolrun_opts *opts, struct agent_vendor_result *vr,
		       char *err, size_t errlen);

/*
 * Keeps the last good result of each vendor between rounds, so a tool that
 * breaks does not make GPUs vanish from the published status.
 */
struct agent_state {
	struct agent_vendor_result *last[AGENT_NVENDOR];   /* owned; NULL = none yet */
	enum agent_vstate vstate[AGENT_NVENDOR];
	char vmsg[AGENT_NVENDOR][AGENT_ERR_MAX];
	int rounds;
};
void agent_state_init(struct agent_state *st);
void agent_state_release(struct agent_state *st);

/*
 * One detection round: runs the three detectors, logs one line when a
 * vendor starts failing or fails for another reason (a failure that goes on
 * round after round is logged at debug level) and one when it recovers,
 * updates st, and builds the node
 * from st (so a failed vendor keeps its last good devices). Returns 0 when
 * every vendor was detected or absent, 1 when at least one failed (the node
 * is still built), -1 when out of memory.
 */
int agent_detect_round(const struct toolrun_opts *opts, struct agent_state *st,
		       const char *node_name, struct agent_node *node);

#endif
