/*
 * The SVG plot: unallocated GPU % against arrived workload %, like Fig. 9(a)
 * of the FGD paper. Left: the whole run (0..130 %); right: a zoom on the
 * part where policies differ (80..130 %). One median line per series with
 * its 25..75 % band across seeds.
 */
#include "sim_impl.h"

#include <math.h>

static const char *const colors[] = {
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
	"#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8",
};
#define NCOLORS ((int)(sizeof(colors) / sizeof(colors[0])))

struct panel {
	double x, y, w, h;          /* pixels */
	double x0, x1, y0, y1;      /* data range */
};

static double px(const struct panel *p, double v)
{
	return p->x + (v - p->x0) / (p->x1 - p->x0) * p->w;
}

static double py(const struct panel *p, double v)
{
	if (v < p->y0)
		v = p->y0;
	if (v > p->y1)
		v = p->y1;
	return p->y + p->h - (v - p->y0) / (p->y1 - p->y0) * p->h;
}

/* Escapes &, <, > for text nodes. */
static int add_text(struct buf *b, const char *s)
{
	int rc = 0;
	for (; *s && !rc; s++) {
		if (*s == '&')
			rc = buf_adds(b, "&amp;");
		else if (*s == '<')
			rc = buf_adds(b, "&lt;");
		else if (*s == '>')
			rc = buf_adds(b, "&gt;");
		else
			rc = buf_addc(b, *s);
	}
	return rc;
}

static int axes(struct buf *b, const struct panel *p, double xstep, double ystep,
		const char *xlabel, const char *ylabel)
{
	int rc = buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			    "fill=\"none\" stroke=\"#444\"/>\n", p->x, p->y, p->w, p->h);
	for (double v = p->x0; !rc && v <= p->x1 + 1e-9; v += xstep) {
		rc = buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
				"stroke=\"#ddd\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
				"text-anchor=\"middle\">%g</text>\n",
				px(p, v), p->y, px(p, v), p->y + p->h, px(p, v), p->y + p->h + 14, v);
	}
	for (double v = p->y0; !rc && v <= p->y1 + 1e-9; v += ystep) {
		rc = buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
				"stroke=\"#ddd\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
				"text-anchor=\"end\">%g</text>\n",
				p->x, py(p, v), p->x + p->w, py(p, v), p->x - 4, py(p, v) + 4, v);
	}
	if (!rc)
		rc = buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
				p->x + p->w / 2, p->y + p->h + 32, xlabel);
	if (!rc)
		rc = buf_printf(b, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" font-size=\"12\" "
				"text-anchor=\"middle\">%s</text>\n", p->x - 38, p->y + p->h / 2, ylabel);
	return rc;
}

static int draw_series(struct buf *b, const struct panel *p, const struct sim_series *s,
		       const char *color)
{
	int from = (int)ceil(p->x0), to = (int)floor(p->x1);
	if (to > SIM_MAX_PCT)
		to = SIM_MAX_PCT;
	/* The band: hi forward, lo backward. */
	int rc = buf_printf(b, "<polygon fill=\"%s\" fill-opacity=\"0.15\" stroke=\"none\" points=\"", color);
	for (int x = from; !rc && x <= to; x++)
		rc = buf_printf(b, "%.1f,%.1f ", px(p, x), py(p, s->hi[x]));
	for (int x = to; !rc && x >= from; x--)
		rc = buf_printf(b, "%.1f,%.1f ", px(p, x), py(p, s->lo[x]));
	if (!rc)
		rc = buf_printf(b, "\"/>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", color);
	for (int x = from; !rc && x <= to; x++)
		rc = buf_printf(b, "%.1f,%.1f ", px(p, x), py(p, s->median[x]));
	if (!rc)
		rc = buf_adds(b, "\"/>\n");
	return rc;
}

int sim_plot_svg(struct buf *b, const char *title, const struct sim_series *s, int n)
{
	const double W = 980, H = 440 + 18.0 * ((n + 3) / 4);
	struct panel full = { 60, 50, 400, 320, 0, 130, 0, 100 };
	struct panel zoom = { 540, 50, 400, 320, 80, 130, 0, 10 };
	/* Zoom range: up to the largest median past 80 %, rounded up. */
	double top = 0;
	for (int i = 0; i < n; i++)
		for (int x = 80; x <= SIM_MAX_PCT; x++)
			top = s[i].median[x] > top ? s[i].median[x] : top;
	top = top > 30 ? 30 : top + 0.5;
	double ystep = top <= 10 ? 1 : top <= 20 ? 2 : 5;
	zoom.y1 = ceil(top / ystep) * ystep;
	if (zoom.y1 < 2)
		zoom.y1 = 2;

	int rc = buf_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
			    "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
			    "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
			    "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">",
			    W, H, W, H, W / 2);
	if (!rc)
		rc = add_text(b, title);
	if (!rc)
		rc = buf_adds(b, "</text>\n");
	if (!rc)
		rc = axes(b, &full, 10, 10, "arrived workload (% of GPU capacity)", "unallocated GPU (%)");
	if (!rc)
		rc = axes(b, &zoom, 5, ystep, "arrived workload (%), zoom", "unallocated GPU (%)");
	/* The ideal: unallocated = 100 - arrived. */
	if (!rc)
		rc = buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" "
				"stroke-dasharray=\"4 3\"/>\n", px(&full, 0), py(&full, 100),
				px(&full, 100), py(&full, 0));
	double ideal_from = 100 - zoom.y1 > zoom.x0 ? 100 - zoom.y1 : zoom.x0;
	if (!rc)
		rc = buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" "
				"stroke-dasharray=\"4 3\"/>\n", px(&zoom, ideal_from),
				py(&zoom, 100 - ideal_from), px(&zoom, 100), py(&zoom, 0));
	for (int i = 0; i < n && !rc; i++) {
		const char *col = colors[i % NCOLORS];
		rc = draw_series(b, &full, &s[i], col);
		if (!rc)
			rc = draw_series(b, &zoom, &s[i], col);
		/* Legend: four per row under the panels. */
		double lx = 60 + (i % 4) * 230.0, ly = 420 + (i / 4) * 18.0;
		if (!rc)
			rc = buf_printf(b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
					"stroke-width=\"3\"/>\n<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">",
					lx, ly - 4, lx + 22, ly - 4, col, lx + 28, ly);
		if (!rc)
			rc = add_text(b, s[i].label);
		if (!rc)
			rc = buf_printf(b, " (%.2f%% at 100%%)</text>\n", s[i].median[100]);
	}
	if (!rc)
		rc = buf_adds(b, "</svg>\n");
	return rc;
}
