#!/usr/bin/env python3
"""Turns `tmux capture-pane -e -p` output (text with SGR colour codes) into an
HTML page a headless browser can screenshot: how docs/src/images/dashboard.png is made.

    tmux capture-pane -e -p -t dash > cap.txt
    python3 docs/render_capture.py cap.txt > cap.html
    chromium --headless --screenshot=docs/src/images/dashboard.png --window-size=1000,640 cap.html

Standard library only. Handles what ratatui emits: reset, bold, dim,
italic, underline, reverse, the 8/16 basic colours and 256-colour indexes.
"""

import html
import re
import sys

BASIC = ["#1e1e1e", "#cd3131", "#0dbc79", "#c8a600", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5"]
BRIGHT = ["#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"]
FG, BG = "#d4d4d4", "#1e1e1e"


def colour256(n: int) -> str:
    if n < 8:
        return BASIC[n]
    if n < 16:
        return BRIGHT[n - 8]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return "#%02x%02x%02x" % (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return "#%02x%02x%02x" % (v, v, v)


def render(text: str) -> str:
    state = {}
    out = []
    pos = 0
    for m in re.finditer(r"\x1b\[([0-9;]*)m", text):
        out.append(span(text[pos:m.start()], state))
        pos = m.end()
        codes = [int(c) if c else 0 for c in m.group(1).split(";")]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                state = {}
            elif c in (1, 2, 3, 4, 7):
                state[c] = True
            elif c in (22, 23, 24, 27):
                for k in {22: (1, 2), 23: (3,), 24: (4,), 27: (7,)}[c]:
                    state.pop(k, None)
            elif 30 <= c <= 37:
                state["fg"] = BASIC[c - 30]
            elif 90 <= c <= 97:
                state["fg"] = BRIGHT[c - 90]
            elif 40 <= c <= 47:
                state["bg"] = BASIC[c - 40]
            elif c == 39:
                state.pop("fg", None)
            elif c == 49:
                state.pop("bg", None)
            elif c in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                state["fg" if c == 38 else "bg"] = colour256(codes[i + 2])
                i += 2
            i += 1
    out.append(span(text[pos:], state))
    return "".join(out)


def span(chunk: str, state: dict) -> str:
    if not chunk:
        return ""
    fg, bg = state.get("fg", FG), state.get("bg", BG)
    if state.get(7):
        fg, bg = bg, fg
    style = [f"color:{fg}", f"background:{bg}"]
    if state.get(1):
        style.append("font-weight:bold")
    if state.get(2):
        style.append("opacity:.6")
    if state.get(3):
        style.append("font-style:italic")
    if state.get(4):
        style.append("text-decoration:underline")
    return f'<span style="{";".join(style)}">{html.escape(chunk)}</span>'


def main() -> None:
    text = open(sys.argv[1], encoding="utf-8").read()
    body = render(text)
    print(
        "<!doctype html><meta charset=utf-8><body style='margin:0;background:%s'>"
        "<pre style='margin:12px;font:14px/1.25 \"DejaVu Sans Mono\",monospace;color:%s'>%s</pre>"
        % (BG, FG, body)
    )


if __name__ == "__main__":
    main()
