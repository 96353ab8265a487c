"""The PDF report: the same content as the HTML, laid out by reportlab (a PyPI wheel; no browser, no system
library) on A4 landscape pages, with figures as PNG and a bookmark per section.

Text uses the DejaVu fonts that matplotlib ships (Δ, ×, ≥ and − are outside the PDF base-14 fonts' encoding).
"""

from __future__ import annotations

import io
from pathlib import Path
from xml.sax.saxutils import escape

import matplotlib
from reportlab.lib import colors
from reportlab.lib.enums import TA_RIGHT
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import inch
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import (
    BaseDocTemplate,
    Flowable,
    Frame,
    Image,
    KeepTogether,
    PageBreak,
    PageTemplate,
    Paragraph,
    Spacer,
    TableStyle,
)
from reportlab.platypus import Table as PdfTable

from relaxbench import __version__
from relaxbench.report.content import NoticeText, Report
from relaxbench.report.figures import FigureArt
from relaxbench.report.tables import Table

PAGE = landscape(A4)
MARGIN = 0.5 * inch
FONT, BOLD, MONO = "RB-Sans", "RB-Sans-Bold", "RB-Mono"
TABLE_FONT_SIZE = 6.8
INK = colors.HexColor("#1d1d1f")
MUTED = colors.HexColor("#5f6368")
BAND = colors.HexColor("#f0f0f3")
RULE = colors.HexColor("#cfcfd6")
LEVEL_COLORS = {"warning": "#a4461b", "info": "#2b5797"}


def _register_fonts() -> None:
    if FONT in pdfmetrics.getRegisteredFontNames():
        return
    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    pdfmetrics.registerFont(TTFont(FONT, str(folder / "DejaVuSans.ttf")))
    pdfmetrics.registerFont(TTFont(BOLD, str(folder / "DejaVuSans-Bold.ttf")))
    pdfmetrics.registerFont(TTFont(MONO, str(folder / "DejaVuSansMono.ttf")))
    pdfmetrics.registerFontFamily(FONT, normal=FONT, bold=BOLD, italic=FONT, boldItalic=BOLD)


def _styles() -> dict[str, ParagraphStyle]:
    base = ParagraphStyle("body", fontName=FONT, fontSize=9, leading=12, textColor=INK)
    return {
        "body": base,
        "title": ParagraphStyle("title", parent=base, fontName=BOLD, fontSize=18, leading=22, spaceAfter=4),
        "h2": ParagraphStyle("h2", parent=base, fontName=BOLD, fontSize=14, leading=18, spaceBefore=6, spaceAfter=6,
                             keepWithNext=True),
        "h3": ParagraphStyle("h3", parent=base, fontName=BOLD, fontSize=11.5, leading=15, spaceBefore=8,
                             spaceAfter=4, keepWithNext=True),
        "meta": ParagraphStyle("meta", parent=base, fontSize=8, leading=10.5, textColor=MUTED, spaceAfter=4),
        "headline": ParagraphStyle("headline", parent=base, fontSize=9.5, leading=13, backColor=BAND, borderPadding=5,
                                   spaceBefore=4, spaceAfter=8, leftIndent=4, rightIndent=4),
        "caption": ParagraphStyle("caption", parent=base, fontSize=7.5, leading=9.5, textColor=MUTED, spaceAfter=10),
        "cell": ParagraphStyle("cell", parent=base, fontSize=TABLE_FONT_SIZE, leading=TABLE_FONT_SIZE + 1.6),
        "cell-num": ParagraphStyle("cell-num", parent=base, fontSize=TABLE_FONT_SIZE, leading=TABLE_FONT_SIZE + 1.6,
                                   alignment=TA_RIGHT),
        "head": ParagraphStyle("head", parent=base, fontName=BOLD, fontSize=TABLE_FONT_SIZE,
                               leading=TABLE_FONT_SIZE + 1.6),
        "table-title": ParagraphStyle("table-title", parent=base, fontName=BOLD, fontSize=8.5, leading=11,
                                      spaceBefore=6, spaceAfter=3, keepWithNext=True),
        "term": ParagraphStyle("term", parent=base, fontName=BOLD, fontSize=9, leading=12, spaceBefore=4),
        "definition": ParagraphStyle("definition", parent=base, leftIndent=14),
    }


class Heading(Paragraph):
    """A section heading that also becomes a PDF bookmark."""

    def __init__(self, text: str, style: ParagraphStyle, key: str, level: int) -> None:
        super().__init__(escape(text), style)
        self.outline = (text, key, level)


class ReportDoc(BaseDocTemplate):
    def __init__(self, path: Path, report: Report) -> None:
        super().__init__(str(path), pagesize=PAGE, leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN,
                         bottomMargin=MARGIN, title=report.title, author="relaxbench",
                         subject=f"run {report.run_key}", creator=f"relaxbench {__version__}")
        frame = Frame(self.leftMargin, self.bottomMargin, self.width, self.height, id="body")
        self.addPageTemplates([PageTemplate("page", [frame], onPage=self._footer)])
        self.report = report

    def _footer(self, canvas, doc) -> None:
        canvas.saveState()
        canvas.setFont(FONT, 7)
        canvas.setFillColor(MUTED)
        canvas.drawString(MARGIN, MARGIN / 2, f"relaxbench report · run {self.report.run_key}")
        canvas.drawRightString(PAGE[0] - MARGIN, MARGIN / 2, f"page {doc.page}")
        canvas.restoreState()

    def afterFlowable(self, flowable: Flowable) -> None:
        outline = getattr(flowable, "outline", None)
        if outline:
            text, key, level = outline
            self.canv.bookmarkPage(key)
            self.canv.addOutlineEntry(text, key, level=level, closed=level > 0)


def _column_widths(table: Table, available: float) -> list[float]:
    """Natural widths (longest text per column). When the table is too wide, the first column (the arm or task
    name, which must stay on one line) keeps its width and the others share one common cap."""
    pad = 8.0
    natural = []
    for i, name in enumerate(table.columns):
        texts = [row.cells[i].text for row in table.rows if i < len(row.cells)]
        longest = max([pdfmetrics.stringWidth(t, FONT, TABLE_FONT_SIZE) for t in texts] or [0.0])
        header = max(pdfmetrics.stringWidth(word, BOLD, TABLE_FONT_SIZE) for word in (name.split() or [""]))
        natural.append(max(longest, header, 18.0) + pad)
    if sum(natural) <= available:
        return natural
    first = min(natural[0], available * 0.35)
    rest, room = natural[1:], available - first
    low, high = 0.0, max(rest)
    for _ in range(40):  # bisect the cap c with sum(min(w, c)) == room
        cap = (low + high) / 2
        if sum(min(w, cap) for w in rest) > room:
            high = cap
        else:
            low = cap
    return [first] + [min(w, low) for w in rest]


def _table(table: Table, styles: dict[str, ParagraphStyle], available: float) -> list[Flowable]:
    widths = _column_widths(table, available)
    data = [[Paragraph(escape(c), styles["head"]) for c in table.columns]]
    emphasis = []
    for r, row in enumerate(table.rows, start=1):
        data.append([Paragraph(escape(cell.text), styles["cell-num" if cell.numeric else "cell"])
                     for cell in row.cells])
        if row.emphasis:
            emphasis.append(r)
    style = [("FONT", (0, 0), (-1, -1), FONT, TABLE_FONT_SIZE), ("VALIGN", (0, 0), (-1, -1), "TOP"),
             ("LINEBELOW", (0, 0), (-1, 0), 1.0, INK), ("LINEBELOW", (0, 1), (-1, -1), 0.4, RULE),
             ("TOPPADDING", (0, 0), (-1, -1), 1.5), ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
             ("LEFTPADDING", (0, 0), (-1, -1), 3), ("RIGHTPADDING", (0, 0), (-1, -1), 3)]
    style += [("BACKGROUND", (0, r), (-1, r), BAND) for r in emphasis]
    flow: list[Flowable] = [Paragraph(escape(table.title), styles["table-title"]),
                            PdfTable(data, colWidths=widths, repeatRows=1, hAlign="LEFT", style=TableStyle(style))]
    if table.note:
        flow.append(Paragraph(escape(table.note), styles["caption"]))
    return flow


def _notices(notices: tuple[NoticeText, ...], styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    return [Paragraph(f'<font color="{LEVEL_COLORS.get(n.level, "#000000")}"><b>{n.level}:</b> {escape(n.text)}</font>',
                      styles["body"], bulletText="•") for n in notices]


def _figure(figure: FigureArt, styles: dict[str, ParagraphStyle], width: float, height: float) -> list[Flowable]:
    """The figure scaled into ``width`` × ``height`` points, with its caption below."""
    width_in, height_in = figure.size_inches
    scale = min(width / (width_in * 72), height / (height_in * 72))
    image = Image(io.BytesIO(figure.png(dpi=200)), width=width_in * 72 * scale, height=height_in * 72 * scale)
    image.hAlign = "LEFT"
    caption = f"<b>{escape(figure.title)}.</b> {escape(figure.method)}"
    if figure.note:
        caption += " " + escape(figure.note)
    return [image, Paragraph(caption, styles["caption"])]


def _figures(figures: tuple[FigureArt, ...], styles: dict[str, ParagraphStyle], frame: tuple[float, float]
             ) -> list[Flowable]:
    """The first figure (the trade-off plot) large on its own; the rest two per row."""
    if not figures:
        return []
    first, rest = figures[0], figures[1:]
    flow: list[Flowable] = [KeepTogether(_figure(first, styles, frame[0] * 0.66, frame[1] * 0.74))]
    half = frame[0] / 2 - 8
    for i in range(0, len(rest), 2):
        pair = [_figure(f, styles, half, frame[1] * 0.36) for f in rest[i:i + 2]]
        while len(pair) < 2:
            pair.append([Spacer(1, 1)])
        grid = PdfTable([pair], colWidths=[half + 8, half + 8], hAlign="LEFT",
                        style=TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP"), ("LEFTPADDING", (0, 0), (-1, -1), 0),
                                          ("RIGHTPADDING", (0, 0), (-1, -1), 8)]))
        flow.append(grid)
    return flow


def _definitions(items: tuple[tuple[str, str], ...], styles: dict[str, ParagraphStyle]) -> list[Flowable]:
    out: list[Flowable] = []
    for name, text in items:
        out += [Paragraph(escape(name), styles["term"]), Paragraph(escape(text), styles["definition"])]
    return out


def story(report: Report, doc: ReportDoc) -> list[Flowable]:
    styles = _styles()
    available = doc.width
    frame = (doc.width, doc.height)
    names = dict(report.sections)
    flow: list[Flowable] = [
        Paragraph(escape(report.title), styles["title"]),
        Paragraph(escape(f"Run {report.run_key} from {report.run_dir} · report generated {report.generated_at} by "
                         f"relaxbench {__version__} · every figure is derived from the per-sample records in the "
                         "run's results store."), styles["meta"]),
        Paragraph(escape("Contents: " + " · ".join(name for _, name in report.sections)), styles["meta"]),
        Heading(names["summary"], styles["h2"], "summary", 0),
    ]
    flow += [Paragraph(escape(line), styles["headline"]) for line in report.summary_lines]
    flow += _table(report.summary_table, styles, available)
    flow += _notices(report.notices, styles)
    for section in report.tasks:
        flow += [PageBreak(), Heading(f"{names['results']}: {section.task}", styles["h2"], f"task-{section.task}", 0),
                 Paragraph(escape(f"{section.description} · scorer {section.scorer} · {section.n_units} paired units"),
                           styles["meta"]),
                 Paragraph(escape(section.headline), styles["headline"])]
        flow += _notices(section.notices, styles)
        for table in section.tables:
            flow += _table(table, styles, available)
        flow += [Spacer(1, 6)] + _figures(section.figures, styles, frame)
    if report.concurrency is not None:
        flow += [PageBreak(), Heading(names["concurrency"], styles["h2"], "concurrency", 0),
                 Paragraph(escape(report.concurrency.intro), styles["meta"])]
        for part in report.concurrency.tasks:
            flow += [Heading(part.task, styles["h3"], f"concurrency-{part.task}", 1)]
            flow += _table(part.table, styles, available)
            flow += [KeepTogether(_figure(part.figure, styles, frame[0] * 0.8, frame[1] * 0.5))]
    flow += [PageBreak(), Heading(names["methods"], styles["h2"], "methods", 0)]
    flow += _table(report.methods_table, styles, available)
    flow += [Heading(names["setup"], styles["h2"], "setup", 0)]
    flow += _table(report.setup_table, styles, available) + _table(report.tasks_table, styles, available)
    if report.profiles_table is not None:
        flow += _table(report.profiles_table, styles, available)
    flow += [Heading(names["environment"], styles["h2"], "environment", 0)]
    flow += _table(report.environment_table, styles, available) + _table(report.sessions_table, styles, available)
    flow += [PageBreak(), Heading(names["figures-how"], styles["h2"], "figures-how", 0)]
    flow += _definitions(report.figure_methods, styles)
    flow += [Heading(names["definitions"], styles["h2"], "definitions", 0)]
    flow += _definitions(report.definitions, styles)
    return flow


def write_pdf(report: Report, path: Path) -> Path:
    _register_fonts()
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = ReportDoc(path, report)
    doc.build(story(report, doc))
    return path
