/*
 * Parsers for nvidia-smi output: --query-gpu CSV, -L, the MIG table of
 * the plain report, and topo -m. Pure: text in, structs out.
 */
#include "agent_parse.h"

#include "strnum.h"
#include "text.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* ---- --query-gpu CSV ---- */

enum nv_col {
	COL_IGNORE = 0,
	COL_INDEX,
	COL_UUID,
	COL_NAME,
	COL_MEMORY,
	COL_DRIVER,
	COL_BUS,
	COL_CC,
	COL_MIG,
	COL_ECC,
	COL_RETIRED,
	COL_REMAP_PENDING,
	COL_REMAP_FAILURE,
};

static const struct {
	const char *name;
	enum nv_col col;
} col_names[] = {
	{ "index", COL_INDEX },
	{ "uuid", COL_UUID }, { "gpu_uuid", COL_UUID },
	{ "name", COL_NAME }, { "gpu_name", COL_NAME },
	{ "memory.total", COL_MEMORY },
	{ "driver_version", COL_DRIVER },
	{ "pci.bus_id", COL_BUS }, { "gpu_bus_id", COL_BUS },
	{ "compute_cap", COL_CC },
	{ "mig.mode.current", COL_MIG },
	{ "ecc.errors.uncorrected.volatile.total", COL_ECC },
	{ "retired_pages.pending", COL_RETIRED },
	{ "remapped_rows.pending", COL_REMAP_PENDING },
	{ "remapped_rows.failure", COL_REMAP_FAILURE },
};

#define NV_MAX_COLS 512

/* A column name without its unit: "memory.total [MiB]" -> "memory.total". */
static enum nv_col column_kind(const char *s, size_t n)
{
	char name[96];
	const char *br = memchr(s, '[', n);
	if (br)
		n = (size_t)(br - s);
	agent_text_copy(name, sizeof(name), s, n);
	for (size_t i = 0; i < sizeof(col_names) / sizeof(col_names[0]); i++) {
		if (agent_text_ieq(name, col_names[i].name))
			return col_names[i].col;
	}
	return COL_IGNORE;
}

/* Splits line[0, n) at commas into cells (start, length); returns the count. */
static int split_commas(const char *line, size_t n, const char **cell, size_t *clen, int max)
{
	int k = 0;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || line[i] == ',') {
			if (k >= max)
				return max + 1;
			cell[k] = line + start;
			clen[k] = i - start;
			k++;
			start = i + 1;
		}
	}
	return k;
}

static bool is_na(const char *v)
{
	return !*v || agent_text_ieq(v, "[N/A]") || agent_text_ieq(v, "N/A") ||
	       agent_text_ieq(v, "[Not Supported]") || agent_text_ieq(v, "Not Supported") ||
	       agent_text_ieq(v, "[Insufficient Permissions]");
}

/* A text column: kept as printed, left empty when the tool has no value. */
static void set_text(char *dst, size_t size, const char *v)
{
	if (!is_na(v))
		snprintf(dst, size, "%s", v);
}

static bool is_fault(const char *v)
{
	return agent_text_ieq(v, "[GPU is lost]") || agent_text_ieq(v, "[Unknown Error]") ||
	       agent_text_ieq(v, "[GPU requires reset]") || agent_text_ieq(v, "ERR!") ||
	       agent_text_ieq(v, "[Error]");
}

static enum nvsmi_tri tri(const char *v)
{
	if (agent_text_ieq(v, "Yes") || agent_text_ieq(v, "Enabled"))
		return NVSMI_YES;
	if (agent_text_ieq(v, "No") || agent_text_ieq(v, "Disabled"))
		return NVSMI_NO;
	return NVSMI_UNKNOWN;
}

/* "81559 MiB", "81559" -> MiB. */
static bool parse_mib(const char *v, uint32_t *out)
{
	uint64_t n;
	const char *end;
	if (!agent_text_u64(v, &n, &end) || n > UINT32_MAX)
		return false;
	while (*end == ' ')
		end++;
	if (*end && !agent_text_ieq(end, "MiB"))
		return false;
	*out = (uint32_t)n;
	return true;
}

/* "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost..." */
static bool lost_line(const char *line, size_t n, struct nvsmi_query *q)
{
	static const char pfx[] = "Unable to determine the device handle for GPU";
	if (n < sizeof(pfx) - 1 || strncmp(line, pfx, sizeof(pfx) - 1))
		return false;
	if (q->nlost < NVSMI_MAX_LOST)
		agent_text_copy(q->lost[q->nlost++], sizeof(q->lost[0]), line + sizeof(pfx) - 1,
				n - (sizeof(pfx) - 1));
	return true;
}

/*
 * A line that is nvidia-smi telling us it could not do the query at all:
 * true, with the line in err.
 */
static bool failure_line(const char *line, size_t n, char *err, size_t errlen)
{
	if (!agent_text_ifind(line, n, "NVIDIA-SMI has failed") &&
	    !agent_text_ifind(line, n, "is not a valid field to query") &&
	    !agent_text_ifind(line, n, "couldn't communicate with the NVIDIA driver") &&
	    !agent_text_ifind(line, n, "Invalid combination of input arguments"))
		return false;
	char msg[160];
	agent_text_copy(msg, sizeof(msg), line, n);
	agent_text_err(err, errlen, "nvidia-smi says: %s", msg);
	return true;
}

static int set_columns_from_list(const char *list, size_t n, enum nv_col *kind, int *ncol,
				 char *err, size_t errlen)
{
	const char *cell[NV_MAX_COLS + 1];
	size_t clen[NV_MAX_COLS + 1];
	int k = split_commas(list, n, cell, clen, NV_MAX_COLS);
	if (k > NV_MAX_COLS) {
		agent_text_err(err, errlen, "more than %d columns", NV_MAX_COLS);
		return -1;
	}
	int known = 0;
	for (int i = 0; i < k; i++) {
		kind[i] = column_kind(cell[i], clen[i]);
		known += kind[i] != COL_IGNORE;
	}
	*ncol = k;
	if (!known) {
		agent_text_err(err, errlen, "header names none of index, uuid, name, memory.total");
		return -1;
	}
	return 0;
}

/* A header line: its first cell is not a number and it names a known column. */
static bool looks_like_header(const char *line, size_t n)
{
	const char *cell[NV_MAX_COLS + 1];
	size_t clen[NV_MAX_COLS + 1];
	int k = split_commas(line, n, cell, clen, NV_MAX_COLS);
	if (k < 1 || k > NV_MAX_COLS)
		return false;
	char first[64];
	agent_text_copy(first, sizeof(first), cell[0], clen[0]);
	if (!first[0] || isdigit((unsigned char)first[0]))
		return false;
	for (int i = 0; i < k; i++) {
		if (column_kind(cell[i], clen[i]) != COL_IGNORE)
			return true;
	}
	return false;
}

static int parse_row(const char *line, size_t n, int lineno, const enum nv_col *kind, int ncol,
		     struct nvsmi_row *r, int rowno, char *err, size_t errlen)
{
	const char *cell[NV_MAX_COLS + 1];
	size_t clen[NV_MAX_COLS + 1];
	int k = split_commas(line, n, cell, clen, NV_MAX_COLS);
	if (k != ncol) {
		agent_text_err(err, errlen, "line %d has %d fields, the header has %d", lineno, k, ncol);
		return -1;
	}
	memset(r, 0, sizeof(*r));
	r->index = rowno;
	r->ecc_uncorrected = -1;
	for (int i = 0; i < k; i++) {
		if (kind[i] == COL_IGNORE)
			continue;
		char v[128];
		agent_text_copy(v, sizeof(v), cell[i], clen[i]);
		if (is_fault(v)) {
			if (!r->fault[0])
				snprintf(r->fault, sizeof(r->fault), "%s", v);
			continue;
		}
		switch (kind[i]) {
		case COL_INDEX:
			if (!strnum_int(v, 0, 4095, &r->index)) {
				agent_text_err(err, errlen, "line %d: index '%.32s' is not a number", lineno, v);
				return -1;
			}
			break;
		case COL_UUID:
			set_text(r->uuid, sizeof(r->uuid), v);
			break;
		case COL_NAME:
			set_text(r->name, sizeof(r->name), v);
			break;
		case COL_MEMORY:
			if (is_na(v))
				break;
			if (!parse_mib(v, &r->memory_mib)) {
				agent_text_err(err, errlen, "line %d: memory.total '%.32s' is not MiB", lineno, v);
				return -1;
			}
			r->have_memory = true;
			break;
		case COL_DRIVER:
			set_text(r->driver, sizeof(r->driver), v);
			break;
		case COL_BUS:
			set_text(r->pci_bus, sizeof(r->pci_bus), v);
			break;
		case COL_CC:
			set_text(r->compute_cap, sizeof(r->compute_cap), v);
			break;
		case COL_MIG:
			r->mig = tri(v);
			break;
		case COL_ECC: {
			int64_t e;
			if (!is_na(v) && strnum_i64(v, &e) && e >= 0)
				r->ecc_uncorrected = e;
			break;
		}
		case COL_RETIRED:
			r->retired_pending = tri(v);
			break;
		case COL_REMAP_PENDING:
			r->remap_pending = tri(v);
			break;
		case COL_REMAP_FAILURE:
			r->remap_failure = tri(v);
			break;
		case COL_IGNORE:
			break;
		}
	}
	return 0;
}

int nvsmi_parse_query(const char *text, const char *fields, struct nvsmi_query *q,
		      char *err, size_t errlen)
{
	memset(q, 0, sizeof(*q));
	if (!agent_text_usable(text, true, err, errlen))
		return -1;
	enum nv_col kind[NV_MAX_COLS];
	int ncol = 0;
	bool have_cols = false;
	if (fields && *fields) {
		if (set_columns_from_list(fields, strlen(fields), kind, &ncol, err, errlen))
			return -1;
		have_cols = true;
	}
	const char *p = text;
	const char *line;
	size_t n;
	int lineno = 0;
	bool header_seen = false;
	while ((line = agent_text_line(&p, &n))) {
		lineno++;
		char probe[8];
		agent_text_copy(probe, sizeof(probe), line, n);
		if (!probe[0])
			continue;
		if (lost_line(line, n, q))
			continue;
		if (failure_line(line, n, err, errlen))
			return -1;
		if (agent_text_ifind(line, n, "No devices were found") && n < 40)
			continue;
		if (!header_seen && looks_like_header(line, n)) {
			if (set_columns_from_list(line, n, kind, &ncol, err, errlen))
				return -1;
			have_cols = true;
			header_seen = true;
			continue;
		}
		if (!have_cols) {
			agent_text_err(err, errlen, "line %d: data before any header line", lineno);
			return -1;
		}
		header_seen = true;
		if (q->nrow >= AGENT_MAX_GPUS) {
			agent_text_err(err, errlen, "more than %d GPUs", AGENT_MAX_GPUS);
			return -1;
		}
		if (parse_row(line, n, lineno, kind, ncol, &q->row[q->nrow], q->nrow, err, errlen))
			return -1;
		q->nrow++;
	}
	if (!have_cols && !q->nlost && lineno > 0) {
		agent_text_err(err, errlen, "no header line and no rows");
		return -1;
	}
	q->ncol = ncol;
	for (int i = 0; i < q->nrow; i++) {
		for (int j = 0; j < i; j++) {
			if (q->row[i].index == q->row[j].index) {
				agent_text_err(err, errlen, "GPU index %d is listed twice", q->row[i].index);
				return -1;
			}
		}
	}
	return 0;
}

/* ---- nvidia-smi -L ---- */

/* "GPU 0: NAME (UUID: GPU-...)"; false when the line is not of that form. */
static bool list_gpu_line(const char *line, size_t n, struct nvsmi_list_gpu *g)
{
	char buf[256];
	agent_text_copy(buf, sizeof(buf), line, n);
	if (strncmp(buf, "GPU ", 4))
		return false;
	char *colon = strchr(buf + 4, ':');
	if (!colon)
		return false;
	*colon = '\0';
	if (!strnum_int(buf + 4, 0, 4095, &g->index))
		return false;
	char *rest = colon + 1;
	char *u = strstr(rest, "(UUID: ");
	if (!u)
		return false;
	char *close = strchr(u, ')');
	if (!close)
		return false;
	*close = '\0';
	snprintf(g->uuid, sizeof(g->uuid), "%s", u + 7);
	agent_text_trim(g->uuid);
	*u = '\0';
	snprintf(g->name, sizeof(g->name), "%s", agent_text_trim(rest));
	g->nmig = 0;
	return g->uuid[0] != '\0';
}

/* "  MIG 3g.40gb     Device  0: (UUID: MIG-...)". */
static bool list_mig_line(const char *line, size_t n, struct nvsmi_mig *m)
{
	char buf[256];
	agent_text_copy(buf, sizeof(buf), line, n);
	if (strncmp(buf, "MIG ", 4))
		return false;
	char *s = buf + 4;
	while (*s == ' ')
		s++;
	char *sp = strchr(s, ' ');
	if (!sp)
		return false;
	*sp = '\0';
	snprintf(m->profile, sizeof(m->profile), "%s", s);
	s = sp + 1;
	while (*s == ' ')
		s++;
	if (strncmp(s, "Device", 6))
		return false;
	s += 6;
	while (*s == ' ')
		s++;
	char *colon = strchr(s, ':');
	if (!colon)
		return false;
	*colon = '\0';
	if (!strnum_int(s, 0, 63, &m->dev))
		return false;
	char *u = strstr(colon + 1, "(UUID: ");
	if (!u)
		return false;
	char *close = strrchr(u, ')');
	if (!close)
		return false;
	*close = '\0';
	snprintf(m->uuid, sizeof(m->uuid), "%s", u + 7);
	agent_text_trim(m->uuid);
	return m->uuid[0] != '\0';
}

int nvsmi_parse_list(const char *text, struct nvsmi_list *l, char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	if (!agent_text_usable(text, true, err, errlen))
		return -1;
	const char *p = text;
	const char *line;
	size_t n;
	int lineno = 0;
	while ((line = agent_text_line(&p, &n))) {
		lineno++;
		char probe[8];
		agent_text_copy(probe, sizeof(probe), line, n);
		if (!probe[0])
			continue;
		if (agent_text_ifind(line, n, "Unable to determine the device handle") ||
		    agent_text_ifind(line, n, "No devices found"))
			continue;
		if (failure_line(line, n, err, errlen))
			return -1;
		struct nvsmi_list_gpu g;
		if (list_gpu_line(line, n, &g)) {
			if (l->ngpu >= AGENT_MAX_GPUS) {
				agent_text_err(err, errlen, "more than %d GPUs", AGENT_MAX_GPUS);
				return -1;
			}
			l->gpu[l->ngpu++] = g;
			continue;
		}
		struct nvsmi_mig m;
		if (list_mig_line(line, n, &m)) {
			if (!l->ngpu) {
				agent_text_err(err, errlen, "line %d: MIG device before any GPU", lineno);
				return -1;
			}
			struct nvsmi_list_gpu *pg = &l->gpu[l->ngpu - 1];
			if (pg->nmig >= AGENT_MAX_MIG) {
				agent_text_err(err, errlen, "GPU %d has more than %d MIG devices", pg->index,
					       AGENT_MAX_MIG);
				return -1;
			}
			pg->mig[pg->nmig++] = m;
			continue;
		}
		char shown[64];
		agent_text_copy(shown, sizeof(shown), line, n);
		agent_text_err(err, errlen, "line %d is not a GPU or MIG line: '%s'", lineno, shown);
		return -1;
	}
	return 0;
}

/* ---- the MIG devices table of plain nvidia-smi ---- */

/* Four integers "  0    2   0   0  ". */
static bool four_ints(const char *s, size_t n, int v[4])
{
	int k = 0;
	size_t i = 0;
	while (i < n) {
		while (i < n && (s[i] == ' ' || s[i] == '\t'))
			i++;
		if (i >= n)
			break;
		size_t st = i;
		while (i < n && s[i] != ' ' && s[i] != '\t')
			i++;
		char num[16];
		if (k >= 4 || i - st >= sizeof(num))
			return false;
		agent_text_copy(num, sizeof(num), s + st, i - st);
		if (!strnum_int(num, 0, 4095, &v[k]))
			return false;
		k++;
	}
	return k == 4;
}

int nvsmi_parse_mig_table(const char *text, struct nvsmi_mig_table *t, char *err, size_t errlen)
{
	memset(t, 0, sizeof(*t));
	if (!agent_text_usable(text, false, err, errlen))
		return -1;
	const char *p = text;
	const char *line;
	size_t n;
	bool in = false;
	while ((line = agent_text_line(&p, &n))) {
		if (!in) {
			if (agent_text_ifind(line, n, "MIG devices:"))
				in = true;
			continue;
		}
		if (!n || (line[0] != '|' && line[0] != '+'))
			break;
		if (line[0] != '|')
			continue;
		/* cells between the bars */
		const char *cell[8];
		size_t clen[8];
		int k = 0;
		size_t start = 1;
		for (size_t i = 1; i < n && k < 8; i++) {
			if (line[i] == '|') {
				cell[k] = line + start;
				clen[k] = i - start;
				k++;
				start = i + 1;
			}
		}
		int v[4];
		if (k < 2 || !four_ints(cell[0], clen[0], v))
			continue;   /* header rows and the BAR1 continuation rows */
		const char *slash = memchr(cell[1], '/', clen[1]);
		if (!slash)
			continue;
		const char *q = slash + 1;
		while (*q == ' ')
			q++;
		uint64_t mib;
		const char *end;
		if (!agent_text_u64(q, &mib, &end) || strncmp(end, "MiB", 3) || mib > UINT32_MAX) {
			agent_text_err(err, errlen, "MIG device %d/%d: memory cell is not 'used / totalMiB'",
				       v[0], v[3]);
			return -1;
		}
		if (t->n >= AGENT_MAX_GPUS) {
			agent_text_err(err, errlen, "more than %d MIG devices", AGENT_MAX_GPUS);
			return -1;
		}
		struct nvsmi_mig_mem *m = &t->m[t->n++];
		m->gpu = v[0];
		m->gi = v[1];
		m->ci = v[2];
		m->dev = v[3];
		m->total_mib = (uint32_t)mib;
	}
	return 0;
}

/* ---- topo -m ---- */

#define TOPO_MAX_TOKENS 256

static bool topo_cell(const char *c, unsigned char *type, unsigned char *links)
{
	static const char *const pcie[] = { "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "PCI" };
	*links = 0;
	if (!strcmp(c, "X")) {
		*type = AGENT_LINK_SELF;
		return true;
	}
	if (!strncmp(c, "NV", 2)) {
		int v;
		if (!strnum_int(c + 2, 1, 255, &v))
			return false;
		*type = AGENT_LINK_NVLINK;
		*links = (unsigned char)v;
		return true;
	}
	for (size_t i = 0; i < sizeof(pcie) / sizeof(pcie[0]); i++) {
		if (!strcmp(c, pcie[i])) {
			*type = AGENT_LINK_PCIE;
			return true;
		}
	}
	return false;
}

/* The matrix's columns, from its header, and the GPU rows seen so far. */
struct topo_cols {
	char name[TOPO_MAX_TOKENS][16];
	int gpu[TOPO_MAX_TOKENS];    /* the GPU a column is, or -1 (a NIC) */
	int n, ngpu, rows;
	bool rowseen[AGENT_MAX_GPUS];
};

/* The header's columns up to "CPU Affinity"; the GPU columns must come in order. */
static int topo_header(struct topo_cols *c, char tok[][16], int k, char *err, size_t errlen)
{
	for (int i = 0; i < k && strcmp(tok[i], "CPU"); i++) {
		memcpy(c->name[c->n], tok[i], sizeof(c->name[0]));
		c->gpu[c->n] = agent_text_gpu_label(tok[i]);
		if (c->gpu[c->n] >= 0) {
			if (c->gpu[c->n] != c->ngpu) {
				agent_text_err(err, errlen, "column %s is out of order", tok[i]);
				return -1;
			}
			c->ngpu++;
		}
		c->n++;
	}
	return 0;
}

/* One row of the matrix into t; rows that are not a GPU's (NICs) are skipped. */
static int topo_row(struct topo_cols *c, char tok[][16], int k, struct agent_topo *t, char *err, size_t errlen)
{
	int r = agent_text_gpu_label(tok[0]);
	if (r < 0)
		return 0;   /* NIC rows */
	if (r >= c->ngpu) {
		agent_text_err(err, errlen, "row %s has no column", tok[0]);
		return -1;
	}
	if (k - 1 < c->n) {
		agent_text_err(err, errlen, "row %s has %d cells, the header has %d", tok[0], k - 1, c->n);
		return -1;
	}
	if (c->rowseen[r]) {
		agent_text_err(err, errlen, "row %s appears twice", tok[0]);
		return -1;
	}
	c->rowseen[r] = true;
	c->rows++;
	for (int i = 0; i < c->n; i++) {
		int g = c->gpu[i];
		if (g < 0)
			continue;
		unsigned char ty, li;
		if (!topo_cell(tok[1 + i], &ty, &li) || (ty == AGENT_LINK_SELF) != (g == r)) {
			agent_text_err(err, errlen, "row %s, column %s: unknown link '%s'", tok[0],
				       c->name[i], tok[1 + i]);
			return -1;
		}
		t->type[r][g] = ty;
		t->links[r][g] = li;
		snprintf(t->code[r][g], sizeof(t->code[r][g]), "%s", tok[1 + i]);
	}
	return 0;
}

/* The whole matrix came: a row for each GPU column, and the same link both ways. */
static int topo_complete(const struct topo_cols *c, struct agent_topo *t, char *err, size_t errlen)
{
	if (!c->ngpu) {
		agent_text_err(err, errlen, "no GPU matrix in the output");
		return -1;
	}
	if (c->rows != c->ngpu) {
		agent_text_err(err, errlen, "matrix has %d GPU rows for %d GPU columns", c->rows, c->ngpu);
		return -1;
	}
	for (int a = 0; a < c->ngpu; a++) {
		for (int b = 0; b < a; b++) {
			if (t->type[a][b] != t->type[b][a] || t->links[a][b] != t->links[b][a]) {
				agent_text_err(err, errlen, "matrix is not symmetric at GPU%d/GPU%d", a, b);
				return -1;
			}
		}
	}
	t->n = c->ngpu;
	return 0;
}

int nvsmi_parse_topo(const char *text, struct agent_topo *t, char *err, size_t errlen)
{
	memset(t, 0, sizeof(*t));
	if (!agent_text_usable(text, true, err, errlen))
		return -1;
	char tok[TOPO_MAX_TOKENS + 1][16];
	struct topo_cols cols = { .n = 0 };
	const char *p = text;
	const char *line;
	size_t n;
	int lineno = 0;
	while ((line = agent_text_line(&p, &n))) {
		lineno++;
		if (!n)
			continue;
		if (failure_line(line, n, err, errlen))
			return -1;
		int k = agent_text_words(line, n, tok, TOPO_MAX_TOKENS);
		if (k > TOPO_MAX_TOKENS) {
			agent_text_err(err, errlen, "line %d: too many columns", lineno);
			return -1;
		}
		if (!k)
			continue;
		bool indented = line[0] == ' ' || line[0] == '\t';
		if (!cols.n) {
			/* The header: indented, starts with GPU0. */
			if (indented && !strcmp(tok[0], "GPU0") && topo_header(&cols, tok, k, err, errlen))
				return -1;
			continue;
		}
		if (!strcmp(tok[0], "Legend:"))
			break;
		if (!indented && topo_row(&cols, tok, k, t, err, errlen))
			return -1;
	}
	return topo_complete(&cols, t, err, errlen);
}
