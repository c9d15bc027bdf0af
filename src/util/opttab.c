#include "opttab.h"
#include "strnum.h"

#include <stdint.h>
#include <string.h>

/* 1024 -> "1Ki", 17179869184 -> "16Gi": the sizes a range is given in. */
static void size_text(double v, char *out, size_t len)
{
	static const char *const unit[] = { "", "Ki", "Mi", "Gi", "Ti" };
	int u = 0;
	while (u < 4 && v >= 1024 && (int64_t)v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	snprintf(out, len, "%.0f%s", v, unit[u]);
}

static int set_number(const struct opt *o, char *field, const char *value, const char *label, char *err,
		      size_t errlen)
{
	int64_t i = 0;
	double d = 0;
	bool ok;
	if (o->kind == OPT_SIZE)
		ok = strnum_quantity(value, 1, &i) && i >= o->lo && i <= o->hi;
	else if (o->kind == OPT_INT)
		ok = strnum_i64(value, &i) && i >= o->lo && i <= o->hi;
	else
		ok = strnum_double(value, &d) && d >= o->lo && d <= o->hi;
	if (ok && o->kind == OPT_SIZE)
		*(size_t *)field = (size_t)i;
	else if (ok && o->kind == OPT_INT)
		*(int *)field = (int)i;
	else if (ok)
		*(double *)field = d;
	if (ok)
		return 0;
	if (o->kind == OPT_SIZE) {
		char lo[16], hi[16];
		size_text(o->lo, lo, sizeof(lo));
		size_text(o->hi, hi, sizeof(hi));
		snprintf(err, errlen, "%s: '%s' is not a size between %s and %s", label, value, lo, hi);
	} else {
		snprintf(err, errlen, "%s: '%s' is not a number in %g..%g", label, value, o->lo, o->hi);
	}
	return -1;
}

int opt_set(const struct opt *o, void *base, const char *value, const char *label, char *err, size_t errlen)
{
	char *field = (char *)base + o->offset;
	switch (o->kind) {
	case OPT_PATH:
	case OPT_STR:
		if (o->kind == OPT_PATH && value[0] && value[0] != '/') {
			snprintf(err, errlen, "%s: '%s' is not an absolute path", label, value);
			return -1;
		}
		if (!str_copy(field, o->size, value)) {
			snprintf(err, errlen, "%s: longer than %zu characters", label, o->size - 1);
			return -1;
		}
		return 0;
	case OPT_INT:
	case OPT_DOUBLE:
	case OPT_SIZE:
		return set_number(o, field, value, label, err, errlen);
	case OPT_BOOL:
		if (!strcmp(value, "true") || !strcmp(value, "1"))
			*(bool *)field = true;
		else if (!strcmp(value, "false") || !strcmp(value, "0"))
			*(bool *)field = false;
		else {
			snprintf(err, errlen, "%s: '%s' is not true or false", label, value);
			return -1;
		}
		return 0;
	case OPT_FUNC:
		return o->set(base, o, value, label, err, errlen);
	}
	return -1;
}

int opt_defaults(const struct opt *t, size_t n, void *base, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (!t[i].def)
			continue;
		char label[80];
		snprintf(label, sizeof(label), "the default of --%s", t[i].flag);
		if (opt_set(&t[i], base, t[i].def, label, err, errlen))
			return -1;
	}
	return 0;
}

const struct opt *opt_find_flag(const struct opt *t, size_t n, const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(t[i].flag) == len && !strncmp(t[i].flag, name, len))
			return &t[i];
	return NULL;
}

const struct opt *opt_find_key(const struct opt *t, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].key && !strcmp(t[i].key, key))
			return &t[i];
	return NULL;
}

static const struct opt *opt_find_letter(const struct opt *t, size_t n, char letter)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].letter == letter)
			return &t[i];
	return NULL;
}

static bool is_bool_word(const char *s)
{
	return !strcmp(s, "true") || !strcmp(s, "false");
}

/* One --flag at argv[*i]; a value that is a separate word moves *i on. */
static int parse_flag(const struct opt *t, size_t n, void *base, int argc, char **argv, int *i, char *err,
		      size_t errlen)
{
	const char *a = argv[*i];
	const char *name = a + 2;
	const char *eq = strchr(name, '=');
	const struct opt *o = opt_find_flag(t, n, name, eq ? (size_t)(eq - name) : strlen(name));
	if (!o) {
		snprintf(err, errlen, "unknown flag '%s' (see --help)", a);
		return -1;
	}
	const char *value = eq ? eq + 1 : NULL;
	if (!value && o->kind == OPT_BOOL)
		value = *i + 1 < argc && is_bool_word(argv[*i + 1]) ? argv[++*i] : "true";
	if (!value) {
		if (*i + 1 >= argc) {
			snprintf(err, errlen, "--%s needs %s", o->flag, o->arg ? o->arg : "a value");
			return -1;
		}
		value = argv[++*i];
	}
	char label[80];
	snprintf(label, sizeof(label), "--%s", o->flag);
	return opt_set(o, base, value, label, err, errlen);
}

int opt_parse(const struct opt *t, size_t n, void *base, int argc, char **argv, const char **pos, int maxpos,
	      int *npos, char *err, size_t errlen)
{
	*npos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return OPT_HELP;
		if (!strcmp(a, "--help=markdown"))
			return OPT_HELP_MARKDOWN;
		const struct opt *l = a[0] == '-' && a[1] && !a[2] ? opt_find_letter(t, n, a[1]) : NULL;
		if (l) {
			if (++i >= argc) {
				snprintf(err, errlen, "%s needs %s", a, l->arg ? l->arg : "a value");
				return -1;
			}
			if (opt_set(l, base, argv[i], a, err, errlen))
				return -1;
			continue;
		}
		if (strncmp(a, "--", 2)) {
			if (*npos >= maxpos) {
				snprintf(err, errlen, "unexpected argument '%s'", a);
				return -1;
			}
			pos[(*npos)++] = a;
			continue;
		}
		if (parse_flag(t, n, base, argc, argv, &i, err, errlen))
			return -1;
	}
	return OPT_OK;
}

/* "(default D; 0: Z)" or "" when the row has neither. */
static void notes(const struct opt *o, char *out, size_t len)
{
	const char *def = o->shown ? o->shown : o->def;
	int w = 0;
	out[0] = '\0';
	if (def)
		w = snprintf(out, len, "default %s", def[0] ? def : "\"\"");
	if (o->zero && w >= 0 && (size_t)w < len)
		snprintf(out + w, len - (size_t)w, "%s0: %s", w ? "; " : "", o->zero);
}

/* text from column 8, wrapped before column 80. */
static void wrapped(FILE *out, const char *text)
{
	size_t col = 0;
	while (*text) {
		size_t word = strcspn(text, " ");
		if (col && col + 1 + word > 72) {
			fputc('\n', out);
			col = 0;
		}
		fprintf(out, "%s%.*s", col ? " " : "        ", (int)word, text);
		col += word + (col ? 1 : 0);
		text += word;
		text += strspn(text, " ");
	}
	fputc('\n', out);
}

void opt_usage(FILE *out, const struct opt *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct opt *o = &t[i];
		char note[400], line[2048];
		notes(o, note, sizeof(note));
		if (o->letter)
			fprintf(out, "  -%c, ", o->letter);
		fprintf(out, "%s--%s%s%s\n", o->letter ? "" : "  ", o->flag, o->arg ? " " : "", o->arg ? o->arg : "");
		int w = snprintf(line, sizeof(line), "%s", o->help);
		if (note[0] && w >= 0 && (size_t)w < sizeof(line))
			w += snprintf(line + w, sizeof(line) - (size_t)w, " (%s)", note);
		if (o->key && w >= 0 && (size_t)w < sizeof(line))
			snprintf(line + w, sizeof(line) - (size_t)w, " [%s]", o->key);
		wrapped(out, line);
	}
}

/* Text in a table cell: '|' would end the cell. */
static void cell(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', out);
		fputc(*s, out);
	}
}

void opt_markdown(FILE *out, const struct opt *t, size_t n)
{
	fputs("| flag | setting | default | meaning |\n|---|---|---|---|\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct opt *o = &t[i];
		const char *def = o->shown ? o->shown : o->def;
		fputs("| ", out);
		if (o->letter)
			fprintf(out, "`-%c`, ", o->letter);
		fprintf(out, "`--%s%s%s` | ", o->flag, o->arg ? " " : "", o->arg ? o->arg : "");
		if (o->key)
			fprintf(out, "`%s`", o->key);
		fputs(" | ", out);
		if (o->shown)
			cell(out, o->shown);
		else if (def && def[0])
			fprintf(out, "`%s`", def);
		else if (def || o->kind == OPT_BOOL)
			fputs(def ? "\"\"" : "`false`", out);
		fputs(" | ", out);
		cell(out, o->help);
		if (o->zero) {
			fputs("; 0: ", out);
			cell(out, o->zero);
		}
		fputs(" |\n", out);
	}
}
