/*
 * The vendor table: one entry per GPU vendor (include/vendor.h). Adding a
 * vendor adds an entry here, its enum value and annotations in vendor.h,
 * and a detector in src/agent/ (docs/architecture.md, "Recipe: a vendor").
 */
#include "vendor.h"

#include <stdio.h>
#include <strings.h>

/* The plugin's CDI kind (devplugin.h DP_CDI_KIND): one spec, every vendor's devices. */
#define CDI_KIND "gpu.scheduling/gpu"

static const struct vendor table[VENDOR_COUNT] = {
	{
		.id = GPU_VENDOR_NVIDIA,
		.name = "nvidia",
		.title = "NVIDIA",
		/* CUDA sees only these; the NVIDIA runtime reads its own variable */
		.env = { { "CUDA_VISIBLE_DEVICES", ANN_CUDA, GPU_VENDOR_NVIDIA },
			 { "NVIDIA_VISIBLE_DEVICES", ANN_NVIDIA, GPU_VENDOR_NVIDIA } },
		.naming = VENDOR_NAME_UUID,
		.selecting_env = { "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES" },
		.devfile = VENDOR_DEV_MINOR,
		.dev_prefix = "/dev/nvidia",
		.minor_dir = "/proc/driver/nvidia/gpus/",
		.minor_file = "/information",
		.minor_key = "Device Minor:",
		.common_files = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
				  "/dev/nvidia-modeset" },
		.required_file = "/dev/nvidiactl",
		.plugin_env = { "CUDA_VISIBLE_DEVICES" },
		.runtime_env = "NVIDIA_VISIBLE_DEVICES",
		.runtime_off = "void",
		.runtime_dir = "/var/run/nvidia-container-devices",
		.cdi_kind = CDI_KIND,
		.share = { "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
			   "CUDA_MPS_PIPE_DIRECTORY" },
		.host_paths = { "/dev/nvidia" },
	},
	{
		.id = GPU_VENDOR_AMD,
		.name = "amd",
		.title = "AMD",
		.env = { { "ROCR_VISIBLE_DEVICES", ANN_ROCR, GPU_VENDOR_AMD } },
		.naming = VENDOR_NAME_UUID,
		.selecting_env = { "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL" },
		.devfile = VENDOR_DEV_DRI,
		.common_files = { "/dev/kfd" },
		.required_file = "/dev/kfd",
		.runtime_env = "",
		.runtime_off = "",
		.runtime_dir = "",
		.cdi_kind = CDI_KIND,
		.host_paths = { "/dev/dri/", "/dev/kfd/" },
	},
	{
		.id = GPU_VENDOR_INTEL,
		.name = "intel",
		.title = "Intel",
		/* Level Zero's mask takes indices only */
		.env = { { "ZE_AFFINITY_MASK", ANN_ZE, GPU_VENDOR_INTEL } },
		.naming = VENDOR_NAME_INDEX,
		.selecting_env = { "ZE_AFFINITY_MASK" },
		.devfile = VENDOR_DEV_DRI,
		.runtime_env = "",
		.runtime_off = "",
		.runtime_dir = "",
		.cdi_kind = CDI_KIND,
		.host_paths = { "/dev/dri/", "/dev/accel" },
	},
};

const struct vendor *vendor_get(enum gpu_vendor v)
{
	if ((unsigned)v < 1 || (unsigned)v > VENDOR_COUNT)
		return NULL;
	return &table[v - 1];
}

const struct vendor *vendor_by_name(const char *name)
{
	for (int i = 0; name && i < VENDOR_COUNT; i++)
		if (!strcasecmp(name, table[i].name))
			return &table[i];
	return NULL;
}

const struct vendor_env *vendor_env_at(size_t k)
{
	for (int i = 0; i < VENDOR_COUNT; i++)
		for (const struct vendor_env *e = table[i].env; e->name; e++)
			if (k-- == 0)
				return e;
	return NULL;
}

void vendor_names_list(char *out, size_t len)
{
	size_t n = 0;
	out[0] = '\0';
	for (int i = 0; i < VENDOR_COUNT && n < len; i++) {
		const char *sep = i == 0 ? "" : i == VENDOR_COUNT - 1 ? " or " : ", ";
		int w = snprintf(out + n, len - n, "%s%s", sep, table[i].name);
		n += w > 0 ? (size_t)w : 0;
	}
}

const char *gpu_vendor_name(enum gpu_vendor v)
{
	const struct vendor *e = vendor_get(v);
	return e ? e->name : "";
}

bool gpu_vendor_parse(const char *s, enum gpu_vendor *out)
{
	const struct vendor *e = vendor_by_name(s);
	if (e)
		*out = e->id;
	return e != NULL;
}
