/*
 * Parsers for the AMD tools: rocminfo (HSA agents), rocm-smi key/value
 * output (JSON or text) and rocm-smi's topology matrix. Pure.
 */
#include "agent_parse.h"

#include "strnum.h"
#include "text.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* ---- rocminfo ---- */

/* The first blank-separated token of a value, as an int. */
static bool first_int(const char *v, int lo, int hi, int *out)
{
	char tok[24];
	size_t n = 0;
	while (v[n] && v[n] != ' ' && v[n] != '\t' && v[n] != '(')
		n++;
	if (!n || n >= sizeof(tok))
		return false;
	memcpy(tok, v, n);
	tok[n] = '\0';
	return strnum_int(tok, lo, hi, out);
}

struct ri_agent {
	bool active;
	bool gpu;
	bool have_name;
	int pool;                /* 0 none, 1 in a pool before its Segment, 2 coarse VRAM pool */
	struct rocm_agent a;
};

static int finish_agent(struct ri_agent *cur, struct rocm_info *ri, char *err, size_t errlen)
{
	if (cur->active && cur->gpu) {
		if (ri->n >= AGENT_MAX_GPUS) {
			agent_text_err(err, errlen, "more than %d GPU agents", AGENT_MAX_GPUS);
			return -1;
		}
		ri->gpu[ri->n++] = cur->a;
	}
	memset(cur, 0, sizeof(*cur));
	return 0;
}

static void agent_field(struct ri_agent *cur, const char *key, const char *val)
{
	struct rocm_agent *a = &cur->a;
	if (!strcmp(key, "Name")) {
		if (cur->have_name)
			return;     /* the ISA's "Name" further down */
		cur->have_name = true;
		char gfx[24];
		if (agent_amd_gfx(val, gfx, sizeof(gfx)))
			snprintf(a->gfx, sizeof(a->gfx), "%s", gfx);
	} else if (!strcmp(key, "Uuid")) {
		if (!a->uuid[0])
			snprintf(a->uuid, sizeof(a->uuid), "%s", val);
	} else if (!strcmp(key, "Marketing Name")) {
		if (!a->marketing[0])
			snprintf(a->marketing, sizeof(a->marketing), "%s", val);
	} else if (!strcmp(key, "Device Type")) {
		cur->gpu = agent_text_iprefix(val, "GPU");
	} else if (!strcmp(key, "Node")) {
		int v;
		if (first_int(val, 0, 1 << 20, &v))
			a->node = v;
	} else if (!strcmp(key, "BDFID")) {
		int v;
		if (first_int(val, 0, 0xffff, &v))
			snprintf(a->pci_bus, sizeof(a->pci_bus), "0000:%02x:%02x.%x", (unsigned)v >> 8,
				 ((unsigned)v >> 3) & 0x1f, (unsigned)v & 7);
	} else if (!strcmp(key, "Chip ID")) {
		int v;
		if (first_int(val, 0, 0xffff, &v))
			a->chip_id = (unsigned)v;
	} else if (!strcmp(key, "Segment")) {
		if (cur->pool == 1)
			cur->pool = (strstr(val, "GLOBAL") && strstr(val, "COARSE GRAINED")) ? 2 : 0;
	} else if (!strcmp(key, "Size")) {
		uint64_t kb;
		if (cur->pool == 2 && !a->vram_mib && agent_text_u64(val, &kb, NULL) &&
		    kb / 1024 <= UINT32_MAX)
			a->vram_mib = (uint32_t)(kb / 1024);
		cur->pool = 0;
	}
}

int rocm_parse_rocminfo(const char *text, struct rocm_info *ri, char *err, size_t errlen)
{
	memset(ri, 0, sizeof(*ri));
	if (!agent_text_usable(text, false, err, errlen))
		return -1;
	if (!strstr(text, "HSA Agents")) {
		const char *bad = strstr(text, "HSA_STATUS_ERROR");
		if (!bad)
			bad = strstr(text, "ROCk module is NOT loaded");
		if (bad) {
			char msg[120];
			size_t n = strcspn(bad, "\n");
			agent_text_copy(msg, sizeof(msg), bad, n);
			agent_text_err(err, errlen, "rocminfo says: %s", msg);
		} else {
			agent_text_err(err, errlen, "no 'HSA Agents' section");
		}
		return -1;
	}
	if (!strstr(text, "*** Done ***")) {
		agent_text_err(err, errlen, "output ends before '*** Done ***' (cut short?)");
		return -1;
	}
	struct ri_agent cur;
	memset(&cur, 0, sizeof(cur));
	const char *p = text;
	const char *line;
	size_t n;
	while ((line = agent_text_line(&p, &n))) {
		char buf[512];
		agent_text_copy(buf, sizeof(buf), line, n);
		if (!buf[0])
			continue;
		static const char ver[] = "ROCk module version ";
		if (!strncmp(buf, ver, sizeof(ver) - 1)) {
			const char *v = buf + sizeof(ver) - 1;
			size_t vl = strcspn(v, " ");
			agent_text_copy(ri->driver, sizeof(ri->driver), v, vl);
			continue;
		}
		int num;
		if (!strncmp(buf, "Agent ", 6) && strnum_int(buf + 6, 1, 1 << 20, &num)) {
			if (finish_agent(&cur, ri, err, errlen))
				return -1;
			cur.active = true;
			cur.a.node = -1;
			continue;
		}
		if (!strncmp(buf, "*** Done", 8))
			break;
		if (!cur.active)
			continue;
		if (!strncmp(buf, "Pool ", 5) && strnum_int(buf + 5, 1, 64, &num)) {
			cur.pool = 1;
			continue;
		}
		char *colon = strchr(buf, ':');
		if (!colon)
			continue;
		*colon = '\0';
		char *val = colon + 1;
		while (*val == ':')
			val++;   /* "Packet Processor uCode:: 92" */
		agent_field(&cur, agent_text_trim(buf), agent_text_trim(val));
	}
	if (finish_agent(&cur, ri, err, errlen))
		return -1;
	return 0;
}

/* ---- rocm-smi key/value ---- */

static struct rocm_card *card_slot(struct rocm_smi *s, int card, char *err, size_t errlen)
{
	for (int i = 0; i < s->n; i++) {
		if (s->card[i].card == card)
			return &s->card[i];
	}
	if (s->n >= AGENT_MAX_GPUS) {
		agent_text_err(err, errlen, "more than %d cards", AGENT_MAX_GPUS);
		return NULL;
	}
	struct rocm_card *c = &s->card[s->n++];
	memset(c, 0, sizeof(*c));
	c->card = card;
	c->node_id = -1;
	return c;
}

static bool na(const char *v)
{
	return !*v || agent_text_ieq(v, "N/A") || agent_text_ieq(v, "[N/A]");
}

static void card_kv(struct rocm_smi *s, struct rocm_card *c, const char *key, const char *val)
{
	if (na(val))
		return;
	if (agent_text_ieq(key, "Card Series"))
		snprintf(c->series, sizeof(c->series), "%s", val);
	else if (agent_text_ieq(key, "Card Model"))
		snprintf(c->model, sizeof(c->model), "%s", val);
	else if (agent_text_ieq(key, "GFX Version")) {
		char gfx[24];
		if (agent_amd_gfx(val, gfx, sizeof(gfx)))
			snprintf(c->gfx, sizeof(c->gfx), "%s", gfx);
	} else if (agent_text_ieq(key, "Device Name"))
		snprintf(c->device_name, sizeof(c->device_name), "%s", val);
	else if (agent_text_ieq(key, "Unique ID"))
		snprintf(c->unique_id, sizeof(c->unique_id), "%s", val);
	else if (agent_text_ieq(key, "PCI Bus"))
		snprintf(c->pci_bus, sizeof(c->pci_bus), "%s", val);
	else if (agent_text_ieq(key, "VRAM Total Memory (B)")) {
		uint64_t b;
		const char *end;
		if (agent_text_u64(val, &b, &end) && !*end)
			c->vram_bytes = b;
	} else if (agent_text_ieq(key, "Node ID")) {
		int v;
		if (strnum_int(val, 0, 1 << 20, &v))
			c->node_id = v;
	} else if (agent_text_ieq(key, "Driver version"))
		snprintf(s->driver, sizeof(s->driver), "%s", val);
}

static int smi_json(const char *text, struct rocm_smi *s, char *err, size_t errlen)
{
	cJSON *root = agent_text_json_object(text, err, errlen);
	if (!root)
		return -1;
	int rc = 0;
	const cJSON *item;
	cJSON_ArrayForEach(item, root) {
		const char *name = item->string ? item->string : "";
		int card = -1;
		if (!strncmp(name, "card", 4) && !strnum_int(name + 4, 0, 4095, &card)) {
			agent_text_err(err, errlen, "JSON key '%.32s' is not cardN", name);
			rc = -1;
			break;
		}
		if (!cJSON_IsObject(item))
			continue;
		struct rocm_card *c = NULL;
		if (card >= 0 && !(c = card_slot(s, card, err, errlen))) {
			rc = -1;
			break;
		}
		const cJSON *kv;
		cJSON_ArrayForEach(kv, item) {
			if (!cJSON_IsString(kv) || !kv->string)
				continue;
			if (c)
				card_kv(s, c, kv->string, kv->valuestring);
			else if (agent_text_ieq(kv->string, "Driver version"))
				snprintf(s->driver, sizeof(s->driver), "%s", kv->valuestring);
		}
	}
	cJSON_Delete(root);
	return rc;
}

static int smi_text(const char *text, struct rocm_smi *s, char *err, size_t errlen)
{
	bool banner = strstr(text, "ROCm System Management Interface") != NULL;
	int records = 0;
	const char *p = text;
	const char *line;
	size_t n;
	while ((line = agent_text_line(&p, &n))) {
		char buf[512];
		agent_text_copy(buf, sizeof(buf), line, n);
		if (!strncmp(buf, "GPU[", 4)) {
			char *close = strchr(buf, ']');
			if (!close)
				continue;
			*close = '\0';
			int card;
			if (!strnum_int(buf + 4, 0, 4095, &card))
				continue;
			char *rest = close + 1;
			while (*rest == ' ' || *rest == '\t')
				rest++;
			if (*rest != ':')
				continue;
			rest++;
			char *colon = strchr(rest, ':');
			if (!colon)
				continue;
			*colon = '\0';
			struct rocm_card *c = card_slot(s, card, err, errlen);
			if (!c)
				return -1;
			card_kv(s, c, agent_text_trim(rest), agent_text_trim(colon + 1));
			records++;
		} else if (agent_text_iprefix(buf, "Driver version:")) {
			char *v = buf + strlen("Driver version:");
			snprintf(s->driver, sizeof(s->driver), "%s", agent_text_trim(v));
			records++;
		}
	}
	if (!records && !banner && *text) {
		agent_text_err(err, errlen, "no GPU[N] records in the output");
		return -1;
	}
	return 0;
}

int rocm_parse_smi(const char *text, struct rocm_smi *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	if (!agent_text_usable(text, false, err, errlen))
		return -1;
	const char *json = agent_text_json(text);
	int rc = json ? smi_json(json, s, err, errlen) : smi_text(text, s, err, errlen);
	if (rc)
		return rc;
	/* keep cards in index order */
	for (int i = 1; i < s->n; i++) {
		struct rocm_card c = s->card[i];
		int j = i - 1;
		while (j >= 0 && s->card[j].card > c.card) {
			s->card[j + 1] = s->card[j];
			j--;
		}
		s->card[j + 1] = c;
	}
	return 0;
}

/* ---- rocm-smi topology ---- */

static bool topo_cell(const char *c, bool diag, unsigned char *type)
{
	if (!strcmp(c, "0") && diag) {
		*type = AGENT_LINK_SELF;
		return true;
	}
	if (!strcmp(c, "XGMI")) {
		*type = AGENT_LINK_XGMI;
		return true;
	}
	if (!strcmp(c, "PCIE")) {
		*type = AGENT_LINK_PCIE;
		return true;
	}
	if (!strcmp(c, "XXXX") || !strcmp(c, "N/A")) {
		*type = AGENT_LINK_UNKNOWN;
		return true;
	}
	return false;
}

static void set_link(struct agent_topo *t, int a, int b, unsigned char type, const char *code)
{
	t->type[a][b] = type;
	t->links[a][b] = type == AGENT_LINK_XGMI ? 1 : 0;
	snprintf(t->code[a][b], sizeof(t->code[a][b]), "%s", code);
}

static int topo_json(const char *text, struct agent_topo *t, char *err, size_t errlen)
{
	cJSON *root = agent_text_json_object(text, err, errlen);
	if (!root)
		return -1;
	static const char key[] = "(Topology) Link type between DRM devices ";
	int maxi = -1, pairs = 0, rc = 0;
	const cJSON *obj;
	cJSON_ArrayForEach(obj, root) {
		const cJSON *kv;
		cJSON_ArrayForEach(kv, obj) {
			if (!kv->string || !cJSON_IsString(kv) || strncmp(kv->string, key, sizeof(key) - 1))
				continue;
			char pair[48];
			snprintf(pair, sizeof(pair), "%s", kv->string + sizeof(key) - 1);
			char *and = strstr(pair, " and ");
			int a, b;
			if (!and)
				continue;
			*and = '\0';
			unsigned char type;
			if (!strnum_int(pair, 0, AGENT_MAX_GPUS - 1, &a) ||
			    !strnum_int(and + 5, 0, AGENT_MAX_GPUS - 1, &b) || a == b ||
			    !topo_cell(kv->valuestring, false, &type)) {
				agent_text_err(err, errlen, "bad link entry '%.60s': '%.16s'", kv->string,
					       kv->valuestring);
				rc = -1;
				goto out;
			}
			set_link(t, a, b, type, kv->valuestring);
			set_link(t, b, a, type, kv->valuestring);
			if (a > maxi)
				maxi = a;
			if (b > maxi)
				maxi = b;
			pairs++;
		}
	}
	if (!pairs) {
		agent_text_err(err, errlen, "no link type entries in the JSON");
		rc = -1;
		goto out;
	}
	t->n = maxi + 1;
	for (int i = 0; i < t->n; i++)
		set_link(t, i, i, AGENT_LINK_SELF, "0");
out:
	cJSON_Delete(root);
	return rc;
}

static int topo_text(const char *text, struct agent_topo *t, char *err, size_t errlen)
{
	const char *sec = strstr(text, "Link Type between two GPUs");
	if (!sec) {
		agent_text_err(err, errlen, "no 'Link Type between two GPUs' matrix");
		return -1;
	}
	const char *p = strchr(sec, '\n');
	if (!p) {
		agent_text_err(err, errlen, "link type matrix is cut short");
		return -1;
	}
	p++;
	char tok[AGENT_MAX_GPUS + 2][16];
	int ncol = -1, rows = 0;
	bool seen[AGENT_MAX_GPUS] = { false };
	const char *line;
	size_t n;
	while ((line = agent_text_line(&p, &n))) {
		int k = agent_text_words(line, n, tok, AGENT_MAX_GPUS + 1);
		if (k > AGENT_MAX_GPUS + 1) {
			agent_text_err(err, errlen, "more than %d GPUs in the matrix", AGENT_MAX_GPUS);
			return -1;
		}
		if (!k || tok[0][0] == '=')
			break;
		if (ncol < 0) {
			for (int i = 0; i < k; i++) {
				if (agent_text_gpu_label(tok[i]) != i) {
					agent_text_err(err, errlen, "matrix header: '%s' where GPU%d was expected",
						       tok[i], i);
					return -1;
				}
			}
			ncol = k;
			continue;
		}
		int r = agent_text_gpu_label(tok[0]);
		if (r < 0 || r >= ncol || seen[r]) {
			agent_text_err(err, errlen, "matrix row '%s' is not a GPU row", tok[0]);
			return -1;
		}
		if (k - 1 != ncol) {
			agent_text_err(err, errlen, "row %s has %d cells for %d GPUs", tok[0], k - 1, ncol);
			return -1;
		}
		seen[r] = true;
		rows++;
		for (int c = 0; c < ncol; c++) {
			unsigned char type;
			if (!topo_cell(tok[1 + c], c == r, &type)) {
				agent_text_err(err, errlen, "row %s, column GPU%d: unknown link '%s'", tok[0], c,
					       tok[1 + c]);
				return -1;
			}
			set_link(t, r, c, type, tok[1 + c]);
		}
	}
	if (ncol <= 0 || rows != ncol) {
		agent_text_err(err, errlen, "link type matrix has %d rows for %d GPUs (cut short?)", rows,
			       ncol < 0 ? 0 : ncol);
		return -1;
	}
	t->n = ncol;
	return 0;
}

int rocm_parse_topo(const char *text, struct agent_topo *t, char *err, size_t errlen)
{
	memset(t, 0, sizeof(*t));
	if (!agent_text_usable(text, false, err, errlen))
		return -1;
	const char *json = agent_text_json(text);
	return json ? topo_json(json, t, err, errlen) : topo_text(text, t, err, errlen);
}
