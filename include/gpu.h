/*
 * gpu: the device and node model shared by the server, the simulator and
 * the agent. Plain data plus a few pure helpers; no I/O, no globals.
 *
 * Units: memory in MiB; compute in milli-GPU (GPU_CORE_FULL is one whole
 * GPU, so "30 percent" is 300); host CPU in millicores.
 */
#ifndef GPU_GPU_H
#define GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vendor.h"           /* enum gpu_vendor, gpu_vendor_name() */

#define GPU_CORE_FULL 1000
#define GPU_MAX_DEVICES 64      /* devices (GPUs or MIG instances) per node */
#define GPU_MAX_ISLANDS 32
#define GPU_UUID_MAX 79         /* bytes of a device's UUID, at most */

enum gpu_health { GPU_HEALTHY = 0, GPU_UNHEALTHY, GPU_HEALTH_UNKNOWN };

/*
 * What the feasibility scan reads about one device: 32 bytes, so a node's
 * devices share a few cache lines (requests scan every node of a cluster).
 * The strings live in a parallel array of struct gpu_device_info.
 */
struct gpu_device {
	int id;                  /* the vendor's index, as its runtime numbers it */
	int island;              /* index into gpu_node.islands, -1 if none */
	enum gpu_vendor vendor;
	enum gpu_health health;
	uint32_t memory_mib;
	/* Usage, derived from the allocations recorded on the node. */
	uint32_t used_mib;
	uint16_t used_core;      /* milli-GPU taken by shared holders */
	uint16_t exclusive;      /* holders that own the whole device */
	uint16_t shared;         /* holders that share it */
	bool external;           /* inUseBy: held by pods we do not track */
	bool mig;                /* a MIG instance (info.mig_profile is set) */
};

/*
 * The rest of a device: read for output and when a claim names a model.
 * The strings but the UUID are shared (intern.h): thousands of devices
 * say the same. The UUID is the node's own copy, as long as it is (41
 * bytes for some vendors'), not a fixed 80: 520,000 devices in the largest
 * clusters. Never NULL; "" when not known.
 */
struct gpu_device_info {
	int vendor_index;        /* the vendor's own index (in index-named lists); = id when unknown */
	const char *uuid;        /* freed with the node (gpu_node_free) */
	const char *model;
	const char *arch;
	const char *driver;
	const char *mig_profile; /* set for a MIG instance ("1g.10gb"), else "" */
};

/* A group of devices joined by a fast interconnect (an NVLink/XGMI domain). */
struct gpu_island {
	char name[48];
	double bandwidth_gbps;   /* interconnect bandwidth between members */
};

struct label {
	char *key;
	char *value;             /* or gpu_label_is_node_name; read it with gpu_label_value */
};

struct gpu_node {
	char *name;
	struct label *labels;    /* sorted by key */
	int nlabels;
	int ndev;
	struct gpu_device *dev;  /* sorted by id */
	struct gpu_device_info *info;   /* info[i] describes dev[i] */
	int nisland;
	struct gpu_island *islands;
	/* Host resources; a capacity of 0 means "not tracked here". */
	int64_t cpu_cap, cpu_used;       /* millicores */
	int64_t mem_cap, mem_used;       /* MiB */
	uint32_t task_kinds;             /* TASK_KIND_* bits of what runs here */
	int share_slots;                 /* shares one GPU may hold (the device plugin's slots); 0 = no limit */
};

/* Kinds of task for policies that group by type (GPU clustering). */
#define TASK_KIND_CPU_ONLY 1u
#define TASK_KIND_SHARED 2u
#define TASK_KIND_WHOLE(k) (4u << ((k) > 8 ? 8 : (k)))

/*
 * A label value that is its node's own name (kubernetes.io/hostname, as
 * kubelet sets it) may be this marker instead, so that nodes labelled
 * alike share one array of labels (the cache's views do).
 */
extern const char gpu_label_is_node_name[];

/* Label l's value on the node named node. */
static inline const char *gpu_label_value_on(const struct label *l, const char *node)
{
	return l->value == gpu_label_is_node_name ? node : l->value;
}

static inline const char *gpu_label_value(const struct gpu_node *n, int i)
{
	return gpu_label_value_on(&n->labels[i], n->name);
}

const char *gpu_health_name(enum gpu_health h);
bool gpu_health_parse(const char *s, enum gpu_health *out);

/* True when the device can take new work at all (healthy, not external). */
static inline bool gpu_usable(const struct gpu_device *d)
{
	return d->health == GPU_HEALTHY && !d->external;
}

static inline uint32_t gpu_free_mib(const struct gpu_device *d)
{
	return d->used_mib >= d->memory_mib ? 0 : d->memory_mib - d->used_mib;
}

/* Inline: the scan calls these for every device of every node of a request. */
static inline uint32_t gpu_free_core(const struct gpu_device *d)
{
	return d->used_core >= GPU_CORE_FULL ? 0 : GPU_CORE_FULL - (uint32_t)d->used_core;
}

/*
 * Model match: case-insensitive, '|' separates alternatives, and an
 * alternative matches when it equals the device's model or MIG profile or
 * appears in the model as whole words ("H100" matches "NVIDIA H100 80GB HBM3").
 */
bool gpu_model_matches(const char *want, const struct gpu_device_info *d);
/*
 * One holder more on d: shared (taking mem_mib and core milli-GPU of it) or
 * exclusive. gpu_unhold takes one away; the counts stop at 0.
 */
void gpu_hold(struct gpu_device *d, bool shared, uint32_t mem_mib, uint32_t core);
void gpu_unhold(struct gpu_device *d, bool shared, uint32_t mem_mib, uint32_t core);
/* No holder on d: the usage that gpu_hold adds, gone (what a GpuNodeStatus lists). */
static inline void gpu_clear_usage(struct gpu_device *d)
{
	d->used_mib = 0;
	d->used_core = 0;
	d->exclusive = 0;
	d->shared = 0;
}

/* The label's value, or NULL. Binary search; labels must be sorted. */
const char *gpu_node_label(const struct gpu_node *n, const char *key);

/*
 * Node lifecycle. A node owns every string and array it points to.
 * gpu_node_clone() returns NULL when out of memory.
 */
struct gpu_node *gpu_node_new(const char *name);
struct gpu_node *gpu_node_clone(const struct gpu_node *n);
void gpu_node_free(struct gpu_node *n);
/* Set or replace a label (keeps the array sorted). 0 or -1 (no memory). */
int gpu_node_set_label(struct gpu_node *n, const char *key, const char *value);
/* Adds a device and its info (NULL: empty; the UUID is copied), keeping both sorted by id. 0 or -1. */
int gpu_node_add_device(struct gpu_node *n, const struct gpu_device *d,
			const struct gpu_device_info *info);
/* Index of the island with that name, adding it if new; -1 on no room. */
int gpu_node_island(struct gpu_node *n, const char *name, double bandwidth_gbps);
/* Index of the device with that id, or -1. */
int gpu_node_find_device(const struct gpu_node *n, int id);

/*
 * A node's state as the fit and the name-blind policies see it: its devices
 * (kind, size, health, usage), islands (names too: a filter's reasons quote
 * them) and host; not its name, labels, device strings (model, uuid) or who
 * holds what. Nodes in the same state get the same fit and rating for a
 * claim that names no labels or device strings, so a request can work out
 * each state once (class_memo.h).
 *
 * As a 128-bit digest, two independent 64-bit chains in which each step is
 * a bijection of the running value: states that differ in one field always
 * differ here, and otherwise the chance that both halves agree is about
 * 2^-128, which a request of a few thousand nodes never meets. (Should it,
 * a node would get another state's answer to filter or prioritize; bind
 * fits the pod afresh against the node's reservations either way.)
 */
struct gpu_state_digest {
	uint64_t a, b;
};

struct gpu_state_digest gpu_node_state_digest(const struct gpu_node *n);

/*
 * Whether after offers more to some claim than before: a device that is
 * new or newly usable (healthy, not held outside), or holds fewer pods or
 * less memory or compute than before; or host cpu or memory freed.
 * Devices are matched by id; before may be NULL (a node not seen before:
 * any usable device counts). Pure; reads at most both nodes' devices.
 */
bool gpu_node_gained(const struct gpu_node *before, const struct gpu_node *after);

#endif
