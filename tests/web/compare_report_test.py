"""Issue 34 point 1: `tensormorph compare --html FILE`, a self-contained
report, opened in headless Chromium with the network off.

Usage:
  compare_report_test.py TENSORMORPH MAKE_DEMO WORKDIR SCREENSHOTS

The demo (tensormorph-make-demo: an F32 GGUF source, its Q8_0 and Q4_K_M)
and a copy of the Q8_0 with one code moved 80 levels (same size, more
error: dominated by the Q8_0, a constructed case) are compared. The report
must:
  - load nothing but itself: the browser's network log (DevTools) holds one
    request, the file's own, and the page's resource timing none;
  - show every cell of the matrix with the type, bits per weight and SQNR of
    `--json compare`, the same numbers;
  - draw one chart point per quantization at (bits per weight, SQNR) of the
    JSON's totals, the planted copy marked dominated, the frontier through
    the others, and a per-layer curve per quantization at the JSON's errors;
  - sort by a click on a quantization's header (worst SQNR first, then
    reversed).
And `--html` onto an input is refused (REQUEST_INVALID) with the input
untouched. Screenshots i34_report_*.png under SCREENSHOTS.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
import traceback

import inspector_test as it

SOURCE = 'model-f32.gguf'
QUANTS = ['model-q8_0.gguf', 'model-q4_k_m.gguf', 'model-q8_0-planted.gguf']
PLANTED_TENSOR = 'blk.0.ffn_up.weight'


def number(v):
    """protobuf's JSON mapping: a double, or 'Infinity'; int64 as a string."""
    return float(v)


def same(a, b):
    a, b = float(a), float(b)
    return a == b or (math.isinf(a) and math.isinf(b) and (a > 0) == (b > 0))


def make_inputs(cli, make_demo, work):
    if os.path.exists(work):
        shutil.rmtree(work)
    subprocess.run([make_demo, work], check=True, stdout=subprocess.DEVNULL)
    it.plant(cli, os.path.join(work, QUANTS[0]), os.path.join(work, QUANTS[2]), PLANTED_TENSOR, (3, 5))


def compare_json(cli, work):
    out = it.run_cli(cli, 'compare', *[os.path.join(work, f) for f in [SOURCE] + QUANTS])
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    rows = [e['row'] for e in events if 'row' in e]
    summaries = [e['summary'] for e in events if 'summary' in e]
    it.check(len(summaries) == 1, f'--json compare printed {len(summaries)} summaries')
    return rows, summaries[0]


def write_report(cli, work, path):
    args = [cli, 'compare', *[os.path.join(work, f) for f in [SOURCE] + QUANTS], '--html', path]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    it.check(r.returncode == 0, f'{" ".join(args)} exited {r.returncode}: {r.stderr.strip()}')
    it.check(os.path.isfile(path), f'compare --html wrote no {path}')


def test_refuses_an_input(cli, work):
    print('--html onto an input is refused, the input untouched')
    target = os.path.join(work, QUANTS[1])
    with open(target, 'rb') as f:
        before = f.read()
    r = subprocess.run([cli, 'compare', *[os.path.join(work, f) for f in [SOURCE] + QUANTS], '--html', target],
                       capture_output=True, text=True, timeout=300)
    it.check(r.returncode == 1, f'--html onto {QUANTS[1]} exited {r.returncode}, not 1 (usage): {r.stderr.strip()}')
    it.check('REQUEST_INVALID' in r.stderr, f'the refusal names no REQUEST_INVALID reason: {r.stderr.strip()}')
    with open(target, 'rb') as f:
        it.check(f.read() == before, f'{QUANTS[1]} changed although --html onto it was refused')


def start_offline_browser():
    options = it.webdriver.ChromeOptions()
    options.binary_location = '/usr/bin/chromium'
    for a in ('--headless=new', '--window-size=1480,1700', '--no-sandbox', '--disable-gpu',
              '--disable-dev-shm-usage', '--force-device-scale-factor=1', '--hide-scrollbars',
              '--allow-file-access-from-files'):
        options.add_argument(a)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL', 'performance': 'ALL'})
    driver = it.webdriver.Chrome(service=it.Service('/usr/bin/chromedriver'), options=options)
    driver.execute_cdp_cmd('Network.enable', {})
    driver.execute_cdp_cmd('Network.emulateNetworkConditions', {
        'offline': True, 'latency': 0, 'downloadThroughput': 0, 'uploadThroughput': 0})
    return driver


def requests_made(driver):
    urls = []
    for entry in driver.get_log('performance'):
        m = json.loads(entry['message'])['message']
        if m.get('method') == 'Network.requestWillBeSent':
            urls.append(m['params']['request']['url'])
    return urls


def check_network(page, expected, when):
    """The requests since the last look (the log is drained as read) are
    `expected`; nothing came from the page's resource timing or console."""
    print(f'the report loads nothing but itself ({when})')
    urls = requests_made(page.d)
    print(f'  requests: {urls}')
    it.check(urls == expected, f'{when}: the report made requests {urls}, not {expected}')
    resources = page.d.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    it.check(resources == [], f'the page fetched resources: {resources}')
    severe = [e['message'] for e in page.d.get_log('browser') if e['level'] == 'SEVERE']
    it.check(not severe, f'the browser console has errors: {severe}')


def check_matrix(page, rows):
    print('the matrix: every cell as --json compare says')
    shown = page.d.execute_script(
        "return [...document.querySelectorAll('.cv-matrix tbody tr')].map(tr => [tr.dataset.tensor,"
        " [...tr.querySelectorAll('td.cv-cell')].map(td => [td.dataset.scheme, td.dataset.bpw, td.dataset.sqnr,"
        " td.dataset.present, td.innerText])]);")
    it.check(len(shown) == len(rows), f'the matrix has {len(shown)} rows, the JSON {len(rows)}')
    by_name = {name: cells for name, cells in shown}
    checked = 0
    for r in rows:
        cells = by_name.get(r['referenceName'])
        it.check(cells is not None, f'the matrix has no row {r["referenceName"]}')
        it.check(len(cells) == len(r['cells']), f'{r["referenceName"]}: {len(cells)} cells, the JSON {len(r["cells"])}')
        for q, (c, (scheme, bpw, sqnr, present, text)) in enumerate(zip(r['cells'], cells)):
            where = f'{r["referenceName"]} [{q}]'
            it.check(present == ('true' if c['present'] else 'false'), f'{where}: present {present}, JSON {c["present"]}')
            it.check(scheme == c['scheme'], f'{where}: type {scheme}, JSON {c["scheme"]}')
            it.check(same(bpw, c['bitsPerWeight']), f'{where}: bits per weight {bpw}, JSON {c["bitsPerWeight"]}')
            it.check(same(sqnr, c['sqnrDb']), f'{where}: SQNR {sqnr}, JSON {c["sqnrDb"]}')
            sq = number(c['sqnrDb'])
            want = f'{c["scheme"]} {number(c["bitsPerWeight"]):.2f} ' + ('inf' if math.isinf(sq) else f'{sq:.2f}')
            it.check(text.startswith(want), f'{where}: the cell reads {text!r}, not {want!r}')
            it.check(text.endswith('!') == (c['maxExcessSteps'] > 0), f'{where}: "!" mark {text!r} against maxExcessSteps {c["maxExcessSteps"]}')
            checked += 1
    planted = by_name[PLANTED_TENSOR][2][4]
    it.check(planted.endswith('!'), f'the planted tensor\'s cell reads {planted!r}, without the "!" beyond the bound')
    print(f'  {len(rows)} rows, {checked} cells equal')


def check_chart(page, summary):
    print('the size-versus-error chart: a point per quantization, the dominated marked, the frontier')
    totals = summary['totals']
    it.check(totals[2]['dominatedBy'] == [0], f'the planted copy is dominated by {totals[2]["dominatedBy"]}, not [0]')
    points = page.d.execute_script(
        "return [...document.querySelectorAll('svg.cv-chart .cv-point')].map(g => [Number(g.dataset.q),"
        " g.dataset.bpw, g.dataset.sqnr, g.dataset.dominated, g.querySelector('circle').getAttribute('cx'),"
        " g.querySelector('circle').getAttribute('cy')]);")
    it.check(len(points) == len(totals), f'{len(points)} chart points for {len(totals)} quantizations')
    for q, bpw, sqnr, dominated, _, _ in points:
        t = totals[q]
        it.check(same(bpw, t['bitsPerWeight']) and same(sqnr, t['sqnrDb']),
                 f'point [{q}] at ({bpw}, {sqnr}), the JSON ({t["bitsPerWeight"]}, {t["sqnrDb"]})')
        it.check(dominated == ('true' if t['dominatedBy'] else 'false'), f'point [{q}] dominated={dominated}, JSON {t["dominatedBy"]}')
    # More bits and more SQNR sit further right and higher.
    pos = {p[0]: (float(p[4]), float(p[5])) for p in points}
    it.check(pos[0][0] > pos[1][0] and pos[0][1] < pos[1][1], f'[0] (Q8_0) is not right of and above [1] (Q4_K_M): {pos}')
    frontier = page.d.execute_script("return document.querySelector('svg.cv-chart .cv-frontier').getAttribute('points');")
    vertices = [tuple(map(float, v.split(','))) for v in frontier.split()]
    want = sorted((pos[q] for q, t in enumerate(totals) if not t['dominatedBy']), key=lambda p: p[0])
    it.check(vertices == want, f'the frontier runs through {vertices}, not the non-dominated {want}')
    print(f'  {len(points)} points, dominated {[p[0] for p in points if p[3] == "true"]}, frontier of {len(vertices)}')


def check_layers(page, summary):
    print('per-layer error curves: a line per quantization at the JSON\'s errors')
    shown = page.d.execute_script(
        "return [...document.querySelectorAll('svg.cv-layers .cv-layer-line')].map(g => [Number(g.dataset.q),"
        " [...g.querySelectorAll('.cv-layer-point')].map(c => [c.dataset.layer, c.dataset.sse, c.dataset.dominated])]);")
    it.check(len(shown) == len(summary['totals']), f'{len(shown)} layer curves for {len(summary["totals"])} quantizations')
    layers = sorted(summary['layers'], key=lambda l: int(l['layer'].rsplit('.', 1)[1]))
    for q, pts in shown:
        it.check([p[0] for p in pts] == [l['layer'] for l in layers], f'curve [{q}] runs over {[p[0] for p in pts]}')
        for (name, sse, dominated), l in zip(pts, layers):
            it.check(same(sse, l['sumSquaredError'][q]), f'curve [{q}] at {name}: {sse}, JSON {l["sumSquaredError"][q]}')
            want = 'true' if q in l['dominated'] else 'false'
            it.check(dominated == want, f'curve [{q}] at {name}: dominated={dominated}, JSON {l["dominated"]}')
    # The planted copy is worse than the Q8_0 in blk.0 only.
    marked = {l['layer']: l['dominated'] for l in layers}
    it.check(2 in marked['blk.0'] and 2 not in marked.get('blk.1', []),
             f'the planted copy is dominated per layer as {marked}, not in blk.0 only')
    print(f'  {len(shown)} curves over {len(layers)} layers, dominated per layer {marked}')


def column_sqnr(page, q):
    """(tensor, SQNR of quantization q) down the matrix as shown. Read as
    text: WebDriver hands JavaScript's Infinity back as null."""
    shown = page.d.execute_script(
        "return [...document.querySelectorAll('.cv-matrix tbody tr')].map(tr =>"
        " [tr.dataset.tensor, tr.querySelectorAll('td.cv-cell')[arguments[0]].dataset.sqnr]);", q)
    return [(name, float(v)) for name, v in shown]


def check_sorting(page, rows):
    print('a click on a header sorts by that quantization\'s SQNR')
    header = page.css('.cv-matrix th[data-sort="1"]')[0]
    header.click()
    up = column_sqnr(page, 1)
    want = sorted(((r['referenceName'], number(r['cells'][1]['sqnrDb'])) for r in rows), key=lambda x: x[1])
    it.check([v for _, v in up] == [v for _, v in want], f'after one click [1] reads {up}, not ascending')
    page.shot('i34_report_sorted')
    header.click()
    down = column_sqnr(page, 1)
    it.check([v for _, v in down] == sorted((v for _, v in want), reverse=True), f'after two clicks [1] reads {down}, not descending')
    page.css('.cv-matrix th[data-sort="name"]')[0].click()
    names = [n for n, _ in column_sqnr(page, 1)]
    it.check(names == sorted(names), f'sorted by name the rows read {names}')
    print(f'  worst of [1] first: {up[0][0]} at {up[0][1]:.2f} dB')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('tensormorph')
    ap.add_argument('make_demo')
    ap.add_argument('workdir')
    ap.add_argument('screenshots')
    a = ap.parse_args()
    os.makedirs(a.screenshots, exist_ok=True)
    work = os.path.abspath(a.workdir)
    driver = None
    try:
        make_inputs(a.tensormorph, a.make_demo, work)
        rows, summary = compare_json(a.tensormorph, work)
        report = os.path.join(work, 'report', 'compare.html')
        os.makedirs(os.path.dirname(report), exist_ok=True)
        write_report(a.tensormorph, work, report)
        test_refuses_an_input(a.tensormorph, work)
        print(f'report {report}: {os.path.getsize(report)} bytes')
        driver = start_offline_browser()
        page = it.Page(driver, '', a.screenshots)
        url = 'file://' + report
        driver.get(url)
        page.wait(lambda: page.css('.cv-matrix tbody tr'), 'the report\'s matrix')
        page.shot('i34_report_overview')
        check_network(page, [url], 'opened')
        check_matrix(page, rows)
        check_chart(page, summary)
        check_layers(page, summary)
        check_sorting(page, rows)
        check_network(page, [], 'after the clicks')
        print('PASS')
        return 0
    except it.Failure as e:
        print(f'FAIL: {e}', file=sys.stderr)
        if driver:
            try:
                for entry in driver.get_log('browser')[-20:]:
                    print(f'  browser console: {entry["level"]} {entry["message"]}', file=sys.stderr)
                driver.save_screenshot(os.path.join(a.screenshots, 'i34_report_failure.png'))
            except Exception:  # noqa: BLE001 (the failure is what matters)
                pass
        return 1
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    finally:
        if driver:
            driver.quit()


if __name__ == '__main__':
    time.tzset()
    sys.exit(main())
