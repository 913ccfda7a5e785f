"""Reads a page that `trainer report` wrote, as an XML document (it fails on a page that is not
well-formed), and prints what it shows as JSON: the facts, the tables (header, cell texts, links,
marked rows), the charts (each series' points from their tooltips, and its lines), the
preformatted blocks, and the links (percent-decoded, relative to the page) that lead nowhere.

usage: read_report.py PAGE
"""
import json
import os
import re
import sys
import urllib.parse
import xml.etree.ElementTree as ET

XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
TIP = re.compile(r"^(?P<series>.*?): (?P<xname>.*?) (?P<x>\S+), (?P<yname>.*?) (?P<y>[^;\s]+)(; (?P<note>.*))?$")


def text(element):
    return "".join(element.itertext())


def read_table(table):
    rows = table.findall(XHTML + "tr")
    out = {"header": [text(th) for th in rows[0].findall(XHTML + "th")], "rows": [], "links": [],
           "marked": []}
    for i, tr in enumerate(rows[1:]):
        cells = tr.findall(XHTML + "td")
        out["rows"].append([text(td) for td in cells])
        out["links"].append([a.get("href") for td in cells for a in td.iter(XHTML + "a")])
        if tr.get("class") == "best":
            out["marked"].append(i)
    return out


def read_chart(svg):
    chart = {"title": text(svg.find(SVG + "title")), "series": {}, "polylines": {},
             "left_out": ""}
    for g in svg.iter(SVG + "g"):
        if g.get("class") != "series":
            continue
        name = g.get("data-name")
        points = []
        for circle in g.findall(SVG + "circle"):
            tip = TIP.match(text(circle.find(SVG + "title")))
            points.append({"x": float(tip["x"]), "y": float(tip["y"]), "note": tip["note"] or ""})
        chart["series"][name] = points
        chart["polylines"][name] = len(g.findall(SVG + "polyline"))
    for t in svg.iter(SVG + "text"):
        if t.get("class") == "left-out":
            chart["left_out"] = text(t)
    return chart


def main():
    page = sys.argv[1]
    root = ET.parse(page).getroot()
    body = root.find(XHTML + "body")
    out = {"title": text(root.find(XHTML + "head").find(XHTML + "title")), "facts": {},
           "tables": [], "charts": [], "pre": [], "missing_links": [], "links": []}
    for table in body.iter(XHTML + "table"):
        if table.get("class") == "facts":
            for tr in table.findall(XHTML + "tr"):
                out["facts"][text(tr.find(XHTML + "th"))] = text(tr.find(XHTML + "td"))
        else:
            out["tables"].append(read_table(table))
    out["charts"] = [read_chart(svg) for svg in body.iter(SVG + "svg")]
    out["pre"] = [text(pre) for pre in body.iter(XHTML + "pre")]
    for a in body.iter(XHTML + "a"):
        href = a.get("href")
        out["links"].append(href)
        target = urllib.parse.unquote(href)
        if not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(page)), target)):
            out["missing_links"].append(href)
    print(json.dumps(out))


main()
