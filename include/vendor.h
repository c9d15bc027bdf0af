/*
 * vendor: what a GPU vendor means to a pod, as one table (src/core/vendor.c).
 *
 * One entry per vendor says every name and file that reaches a container:
 * the visible-devices variables the binding's annotations feed (reserve
 * writes the annotations, the webhook references them), the variables a
 * pod may not set itself, the device files the device plugin hands over
 * and how it finds them, the container runtime's own variable and device
 * list, the CDI kind, the share isolation variables, and the host paths
 * the webhook refuses as volumes. The core, reserve, webhook and devplugin
 * read the table and never name a vendor; the node agent's detectors
 * (src/agent/detect_<name>.c) are the other half of a vendor.
 *
 * Adding a vendor: docs/architecture.md, "Recipe: a vendor".
 * Pure data and lookups: no I/O, no globals besides the const table.
 */
#ifndef GPU_VENDOR_H
#define GPU_VENDOR_H

#include <stdbool.h>
#include <stddef.h>

/* The vendors; GPU_VENDOR_ANY is "not said" (a claim that takes any). */
enum gpu_vendor { GPU_VENDOR_ANY = 0, GPU_VENDOR_NVIDIA, GPU_VENDOR_AMD, GPU_VENDOR_INTEL };
#define VENDOR_COUNT 3          /* the vendors are 1 .. VENDOR_COUNT */

/* The binding's visible-devices annotations (docs/api.md); the table uses them. */
#define ANN_CUDA "gpu.scheduling/cuda-visible-devices"
#define ANN_NVIDIA "gpu.scheduling/nvidia-visible-devices"
#define ANN_ROCR "gpu.scheduling/rocr-visible-devices"
#define ANN_ZE "gpu.scheduling/ze-affinity-mask"

#define VENDOR_MAX_ENV 3        /* per list below */
#define VENDOR_MAX_FILES 4
#define VENDOR_MAX_PATHS 4

/* How a device is named in the vendor's visible-devices list. */
enum vendor_naming {
	VENDOR_NAME_UUID = 0,   /* its UUID when known (stable across renumbering), else its index */
	VENDOR_NAME_INDEX,      /* always the vendor's own index (the list takes no UUIDs) */
};

/* How the device plugin finds a device's own file on the host. */
enum vendor_devfile {
	VENDOR_DEV_DRI = 0,     /* /dev/dri/renderD* and card* of its PCI device (sysfs drm/) */
	VENDOR_DEV_MINOR,       /* dev_prefix<minor>, the minor read from the driver's proc file */
};

/* A variable every container of a GPU pod gets, and the binding annotation it reads. */
struct vendor_env {
	const char *name;               /* "CUDA_VISIBLE_DEVICES" */
	const char *annotation;         /* ANN_CUDA */
	enum gpu_vendor vendor;         /* whose devices the list holds */
};

/* How a share of a GPU is isolated (device plugin, shared pods); NULLs: not at all. */
struct vendor_share {
	const char *core_env;           /* set to the core percent */
	const char *mem_env;            /* set to "<k>=<MiB>M" per device of the vendor */
	const char *pipe_env;           /* set to the control daemon's pipe dir (mounted) */
};

struct vendor {
	enum gpu_vendor id;
	const char *name;               /* "nvidia": GpuNodeStatus, GpuClaim, logs (lower case) */
	const char *title;              /* "NVIDIA": in messages */

	/* Binding (reserve) and webhook: the list variables, each from its annotation. */
	struct vendor_env env[VENDOR_MAX_ENV + 1];       /* ends at name NULL */
	enum vendor_naming naming;
	/* Every variable some runtime or library of the vendor reads to pick GPUs: a pod may not set them. */
	const char *selecting_env[VENDOR_MAX_ENV + 1];   /* ends at NULL */

	/* Device plugin: the files a container gets. */
	enum vendor_devfile devfile;
	const char *dev_prefix;         /* VENDOR_DEV_MINOR: "/dev/nvidia" */
	const char *minor_dir;          /* VENDOR_DEV_MINOR: the proc file is minor_dir<pci>minor_file */
	const char *minor_file;
	const char *minor_key;          /* its line: "<key> <minor>" */
	const char *common_files[VENDOR_MAX_FILES + 1];  /* every container of the vendor needs them */
	const char *required_file;      /* one of those: without it no device of the vendor is healthy */
	const char *plugin_env[VENDOR_MAX_ENV + 1];      /* set by the plugin to the devices' ids */
	const char *runtime_env;        /* what the vendor's runtime hook reads ("" = none) */
	const char *runtime_off;        /* its value that hands over nothing (with CDI) */
	const char *runtime_dir;        /* its device list: mounts named by device ("" = none) */
	const char *cdi_kind;           /* the kind of the CDI names of its devices */
	struct vendor_share share;

	/* Webhook: host paths (prefixes, normalised) a pod may not mount as hostPath. */
	const char *host_paths[VENDOR_MAX_PATHS + 1];    /* ends at NULL */
};

/* The entry of vendor v, or NULL for GPU_VENDOR_ANY and values outside the table. */
const struct vendor *vendor_get(enum gpu_vendor v);
/* The entry named name (case-insensitive), or NULL. */
const struct vendor *vendor_by_name(const char *name);
/*
 * The k-th list variable over every vendor, in table order (k from 0), or
 * NULL past the last: the webhook injects them and the binding writes
 * their annotations in this order.
 */
const struct vendor_env *vendor_env_at(size_t k);

/* The vendors' names for a message: "nvidia, amd or intel" (cut to fit len). */
void vendor_names_list(char *out, size_t len);

/* "nvidia" for GPU_VENDOR_NVIDIA, "" for ANY and values outside the table. */
const char *gpu_vendor_name(enum gpu_vendor v);
/* The vendor named s (case-insensitive, not ""): true and *out set. */
bool gpu_vendor_parse(const char *s, enum gpu_vendor *out);

#endif
