/*
 * The CDI spec of the node's devices (Container Device Interface,
 * cdiVersion 0.6.0): with --delivery cdi, Allocate names devices as
 * "gpu.scheduling/gpu=<kubelet id>" and the runtime (containerd 1.7+ with
 * CDI on) applies the edits written here. Each device carries its own
 * device files; the files every container of a vendor needs (nvidiactl,
 * nvidia-uvm, kfd) are the spec's common edits.
 */
#include "devplugin.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CDI_FILE "gpu.scheduling-gpu.json"

static bool add_nodes(cJSON *edits, const struct dp_devnode *nodes, int n)
{
	cJSON *list = cJSON_AddArrayToObject(edits, "deviceNodes");
	if (!list)
		return false;
	for (int i = 0; i < n; i++) {
		cJSON *d = cJSON_CreateObject();
		if (!d || !cJSON_AddItemToArray(list, d) || !cJSON_AddStringToObject(d, "path", nodes[i].path) ||
		    !cJSON_AddStringToObject(d, "hostPath", nodes[i].host_path) ||
		    !cJSON_AddStringToObject(d, "permissions", "rw"))
			return false;
	}
	return true;
}

char *dp_cdi_spec(const struct dp_inventory *inv)
{
	cJSON *spec = cJSON_CreateObject();
	bool ok = spec && cJSON_AddStringToObject(spec, "cdiVersion", "0.6.0") &&
		  cJSON_AddStringToObject(spec, "kind", DP_CDI_KIND);
	cJSON *devices = ok ? cJSON_AddArrayToObject(spec, "devices") : NULL;
	ok = devices != NULL;
	for (int i = 0; ok && i < inv->ndev; i++) {
		const struct dp_device *d = &inv->dev[i];
		if (!d->nnode)
			continue;          /* a device with no files cannot be allocated: no entry */
		cJSON *dev = cJSON_CreateObject();
		cJSON *edits = dev ? cJSON_AddObjectToObject(dev, "containerEdits") : NULL;
		ok = dev && cJSON_AddItemToArray(devices, dev) && cJSON_AddStringToObject(dev, "name", d->kubelet_id) &&
		     edits && add_nodes(edits, d->node, d->nnode);
	}
	if (ok && inv->ncommon) {
		cJSON *edits = cJSON_AddObjectToObject(spec, "containerEdits");
		ok = edits && add_nodes(edits, inv->common, inv->ncommon);
	}
	char *json = ok ? cJSON_Print(spec) : NULL;
	cJSON_Delete(spec);
	return json;
}

int dp_cdi_write(const char *dir, const char *json, char *err, size_t errlen)
{
	char path[DP_PATH_MAX + 64], tmp[DP_PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", dir, CDI_FILE);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, CDI_FILE);
	if (mkdir(dir, 0755) && errno != EEXIST) {
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	size_t len = strlen(json), off = 0;
	while (off < len) {
		ssize_t w = write(fd, json + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	/* the runtime reads the spec when a container starts: never let it see half a file */
	bool ok = off == len && !fsync(fd);
	int saved = errno;
	ok = !close(fd) && ok;
	if (ok && rename(tmp, path))
		ok = false, saved = errno;
	if (!ok) {
		snprintf(err, errlen, "%s: %s", path, off < len ? "short write" : strerror(saved));
		unlink(tmp);
		return -1;
	}
	return 0;
}
