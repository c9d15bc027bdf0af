/*
 * Parsers for the Intel tools: clinfo (OpenCL devices of every vendor; the
 * Intel detector picks its own) and xpu-smi discovery (table or JSON).
 * Pure.
 */
#include "agent_parse.h"

#include "strnum.h"
#include "text.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* ---- clinfo ---- */

/*
 * clinfo's human form pads each key to a column: "  Device Name<spaces>
 * Intel(R) ...". The key ends at the first run of two blanks (or a tab).
 */
static bool clinfo_kv(const char *line, size_t n, char *key, size_t klen, char *val, size_t vlen)
{
	size_t i = 0;
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	size_t ks = i;
	while (i < n && line[i] != '\t' && !(line[i] == ' ' && i + 1 < n && line[i + 1] == ' '))
		i++;
	if (i >= n)
		return false;
	agent_text_copy(key, klen, line + ks, i - ks);
	agent_text_copy(val, vlen, line + i, n - i);
	return key[0] != '\0';
}

static int tri_yes(const char *v)
{
	if (agent_text_iprefix(v, "Yes"))
		return 1;
	if (agent_text_iprefix(v, "No"))
		return 0;
	return -1;
}

static void clinfo_field(struct clinfo_dev *d, const char *key, const char *val)
{
	if (agent_text_ieq(key, "Device Vendor"))
		snprintf(d->vendor, sizeof(d->vendor), "%s", val);
	else if (agent_text_ieq(key, "Driver Version"))
		snprintf(d->driver, sizeof(d->driver), "%s", val);
	else if (agent_text_ieq(key, "Device UUID"))
		snprintf(d->uuid, sizeof(d->uuid), "%s", val);
	else if (agent_text_ieq(key, "Device Type"))
		d->is_gpu = agent_text_iprefix(val, "GPU") ? 1 : 0;
	else if (agent_text_ieq(key, "Device Available"))
		d->available = tri_yes(val);
	else if (agent_text_ieq(key, "Unified memory for Host and Device"))
		d->unified_mem = tri_yes(val);
	else if (agent_text_ieq(key, "Global memory size")) {
		uint64_t b;
		if (agent_text_u64(val, &b, NULL))
			d->global_mem = b;
	} else if (agent_text_ieq(key, "Device PCI bus info (KHR)")) {
		/* "PCI-E, 0000:03:00.0" */
		const char *c = strchr(val, ',');
		snprintf(d->pci_bus, sizeof(d->pci_bus), "%s", c ? c + 1 : val);
		agent_text_trim(d->pci_bus);
	}
}

int clinfo_parse(const char *text, struct clinfo_out *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	if (!agent_text_usable(text, false, err, errlen))
		return -1;
	char platform[64] = "";
	bool no_platforms = false;
	struct clinfo_dev *d = NULL;
	const char *p = text;
	const char *line;
	size_t n;
	while ((line = agent_text_line(&p, &n))) {
		if (agent_text_ifind(line, n, "NULL platform behavior") ||
		    agent_text_ifind(line, n, "ICD loader properties"))
			break;
		char key[96], val[256];
		if (!clinfo_kv(line, n, key, sizeof(key), val, sizeof(val)))
			continue;
		if (agent_text_ieq(key, "Number of platforms") && !strcmp(val, "0")) {
			no_platforms = true;
			continue;
		}
		if (agent_text_ieq(key, "Platform Name")) {
			snprintf(platform, sizeof(platform), "%s", val);
			continue;
		}
		if (agent_text_ieq(key, "Device Name")) {
			if (c->n >= AGENT_MAX_GPUS) {
				agent_text_err(err, errlen, "more than %d OpenCL devices", AGENT_MAX_GPUS);
				return -1;
			}
			d = &c->dev[c->n++];
			memset(d, 0, sizeof(*d));
			d->is_gpu = -1;
			d->unified_mem = -1;
			d->available = -1;
			snprintf(d->platform, sizeof(d->platform), "%s", platform);
			snprintf(d->name, sizeof(d->name), "%s", val);
			d->pci_device_id = agent_pci_id_in_name(val);
			continue;
		}
		if (d)
			clinfo_field(d, key, val);
	}
	if (!c->n) {
		if (no_platforms)
			return 0;   /* no OpenCL platforms at all: no GPUs */
		agent_text_err(err, errlen, "no 'Device Name' in the output");
		return -1;
	}
	return 0;
}

/* ---- xpu-smi discovery ---- */

static unsigned hex_id(const char *s)
{
	if (!s)
		return 0;
	while (*s == ' ')
		s++;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	return agent_text_hex(s, 8, NULL);
}

static void xpu_field(struct xpusmi_dev *d, const char *key, const char *val)
{
	if (agent_text_ieq(key, "Device Name"))
		snprintf(d->name, sizeof(d->name), "%s", val);
	else if (agent_text_ieq(key, "UUID") || agent_text_ieq(key, "SOC UUID"))
		snprintf(d->uuid, sizeof(d->uuid), "%s", val);
	else if (agent_text_ieq(key, "PCI BDF Address"))
		snprintf(d->pci_bus, sizeof(d->pci_bus), "%s", val);
	else if (agent_text_ieq(key, "PCI Device ID"))
		d->pci_device_id = hex_id(val);
	else if (agent_text_ieq(key, "Driver Version"))
		snprintf(d->driver, sizeof(d->driver), "%s", val);
	else if (agent_text_ieq(key, "Memory Physical Size")) {
		double mib;
		if (agent_text_double(val, &mib, NULL) && mib >= 0 && mib < 1e12)
			d->mem_bytes = (uint64_t)(mib * 1048576.0);
	}
}

static struct xpusmi_dev *xpu_new(struct xpusmi_out *x, int id, char *err, size_t errlen)
{
	if (x->n >= AGENT_MAX_GPUS) {
		agent_text_err(err, errlen, "more than %d devices", AGENT_MAX_GPUS);
		return NULL;
	}
	struct xpusmi_dev *d = &x->dev[x->n++];
	memset(d, 0, sizeof(*d));
	d->id = id;
	return d;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int xpu_json_dev(const cJSON *o, struct xpusmi_out *x, char *err, size_t errlen)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "device_id");
	if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 4095) {
		agent_text_err(err, errlen, "device without a device_id");
		return -1;
	}
	struct xpusmi_dev *d = xpu_new(x, (int)id->valuedouble, err, errlen);
	if (!d)
		return -1;
	const char *s;
	if ((s = jstr(o, "device_name")))
		snprintf(d->name, sizeof(d->name), "%s", s);
	if ((s = jstr(o, "uuid")))
		snprintf(d->uuid, sizeof(d->uuid), "%s", s);
	if ((s = jstr(o, "pci_bdf_address")))
		snprintf(d->pci_bus, sizeof(d->pci_bus), "%s", s);
	if ((s = jstr(o, "pci_device_id")))
		d->pci_device_id = hex_id(s);
	if ((s = jstr(o, "driver_version")))
		snprintf(d->driver, sizeof(d->driver), "%s", s);
	if ((s = jstr(o, "memory_physical_size_byte"))) {
		uint64_t b;
		const char *end;
		if (agent_text_u64(s, &b, &end) && !*end)
			d->mem_bytes = b;
	}
	return 0;
}

static int xpu_json(const char *text, struct xpusmi_out *x, char *err, size_t errlen)
{
	cJSON *root = agent_text_json_object(text, err, errlen);
	if (!root)
		return -1;
	int rc = 0;
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "device_list");
	if (cJSON_IsArray(list)) {
		const cJSON *o;
		cJSON_ArrayForEach(o, list) {
			if ((rc = xpu_json_dev(o, x, err, errlen)))
				break;
		}
	} else if (cJSON_GetObjectItemCaseSensitive(root, "device_id")) {
		rc = xpu_json_dev(root, x, err, errlen);
	} else {
		agent_text_err(err, errlen, "JSON has neither device_list nor device_id");
		rc = -1;
	}
	cJSON_Delete(root);
	return rc;
}

/*
 * The table: "| 0         | Device Name: ... |" starts a device and
 * "|           | Key: Value |" continues it; newer versions drop the bars.
 */
static int xpu_table(const char *text, struct xpusmi_out *x, char *err, size_t errlen)
{
	struct xpusmi_dev *d = NULL;
	const char *p = text;
	const char *line;
	size_t n;
	bool header = false;
	while ((line = agent_text_line(&p, &n))) {
		char buf[512];
		agent_text_copy(buf, sizeof(buf), line, n);
		if (!buf[0] || buf[0] == '+')
			continue;
		/* drop the bars */
		for (char *b = buf; *b; b++) {
			if (*b == '|')
				*b = ' ';
		}
		agent_text_trim(buf);
		if (!buf[0])
			continue;
		if (strstr(buf, "Device ID") && strstr(buf, "Device Information")) {
			header = true;
			continue;
		}
		char *rest = buf;
		if (isdigit((unsigned char)buf[0])) {
			size_t dn = strspn(buf, "0123456789");
			if (buf[dn] == ' ') {
				char num[8];
				agent_text_copy(num, sizeof(num), buf, dn);
				int id;
				if (!strnum_int(num, 0, 4095, &id)) {
					agent_text_err(err, errlen, "bad device id '%s'", num);
					return -1;
				}
				if (!(d = xpu_new(x, id, err, errlen)))
					return -1;
				rest = agent_text_trim(buf + dn);
			}
		}
		char *colon = strchr(rest, ':');
		if (!d || !colon)
			continue;
		*colon = '\0';
		xpu_field(d, agent_text_trim(rest), agent_text_trim(colon + 1));
	}
	if (!x->n && !header) {
		agent_text_err(err, errlen, "no device table in the output");
		return -1;
	}
	return 0;
}

int xpusmi_parse_discovery(const char *text, struct xpusmi_out *x, char *err, size_t errlen)
{
	memset(x, 0, sizeof(*x));
	if (!agent_text_usable(text, false, err, errlen))
		return -1;
	const char *json = agent_text_json(text);
	return json ? xpu_json(json, x, err, errlen) : xpu_table(text, x, err, errlen);
}
