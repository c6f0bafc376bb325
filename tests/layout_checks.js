// Layout problems a reader sees on a rendered docs page; run by tests/test_docs_render.py.
// Returns a list of {kind, what, detail}. `fitCode` (desktop width): code blocks and tables
// must fit their column without scrolling.
(fitCode) => {
  const problems = [];
  const viewport = document.documentElement.clientWidth;
  const article = document.querySelector("article") || document.body;
  const column = article.clientWidth;
  const slack = 1;  // sub-pixel rounding
  const label = (el) => {
    const text = (el.textContent || "").trim().replace(/\s+/g, " ");
    return `<${el.tagName.toLowerCase()}> ${JSON.stringify(text.slice(0, 60))}`;
  };
  const visible = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
  const scrolls = (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
  // The nearest box in the text column (el itself or an ancestor) that the reader
  // can scroll sideways; a whole text column that scrolls does not count.
  const scroller = (el) => {
    for (let e = el; e && e !== article; e = e.parentElement) {
      if (scrolls(e)) return e;
    }
    return null;
  };

  // 1. The page itself never scrolls sideways.
  const pageWidth = document.documentElement.scrollWidth;
  if (pageWidth > viewport + slack) {
    problems.push({kind: "page wider than the viewport", what: location.pathname,
                   detail: `${pageWidth} px in a ${viewport} px viewport`});
  }

  // 2. Code blocks: never clipped; at desktop width, they fit without scrolling.
  for (const pre of article.querySelectorAll("pre")) {
    if (!visible(pre)) continue;
    const over = pre.scrollWidth - pre.clientWidth;
    if (over > slack) {
      if (!scrolls(pre)) {
        problems.push({kind: "code block cut off", what: label(pre),
                       detail: `${over} px hidden, and no scrollbar`});
      } else if (fitCode) {
        problems.push({kind: "code block needs a scrollbar", what: label(pre),
                       detail: `${pre.scrollWidth} px of code in ${pre.clientWidth} px`});
      }
    }
  }

  // 3. At desktop width, a table fits its text column: no column hidden behind a scrollbar.
  if (fitCode) {
    for (const table of article.querySelectorAll("table")) {
      if (!visible(table)) continue;
      const width = Math.max(table.scrollWidth, table.getBoundingClientRect().width);
      if (width > column + slack) {
        problems.push({kind: "table wider than its column", what: label(table.rows[0] || table),
                       detail: `${Math.round(width)} px in a ${column} px column`});
      }
    }
  }

  // 4. Nothing in the text column reaches past the viewport, unless it scrolls.
  const past = new Set();  // report the outermost element only, not each of its children
  for (const el of article.querySelectorAll("*")) {
    if (!visible(el)) continue;
    const box = el.getBoundingClientRect();
    if (box.right > viewport + slack && !scroller(el.parentElement)) {
      past.add(el);
      if (past.has(el.parentElement)) continue;
      problems.push({kind: "content past the viewport", what: label(el),
                     detail: `right edge at ${Math.round(box.right)} px, viewport ${viewport} px`});
    }
  }

  // The width a token may take on one line: the text column for a table cell
  // (the table can grow and scroll), else the content box of its block.
  const room = (el) => {
    if (el.closest("table")) return column;
    let block = el.parentElement;
    while (block && block !== article && getComputedStyle(block).display.startsWith("inline")) {
      block = block.parentElement;
    }
    const style = getComputedStyle(block);
    return block.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  };

  // 5. Inline code without blanks is one token: never split across lines when
  //    it would fit on one line of the text column.
  for (const code of article.querySelectorAll("code, .sig-name, .sig-prename")) {
    if (code.closest("pre") || !visible(code)) continue;
    const text = (code.textContent || "").trim();
    if (!text || /\s/.test(text)) continue;
    const range = document.createRange();
    range.selectNodeContents(code);
    const tops = new Set();
    for (const r of range.getClientRects()) {
      if (r.width > 0) tops.add(Math.round(r.top));
    }
    if (tops.size <= 1) continue;
    const saved = code.style.whiteSpace;
    const savedDisplay = code.style.display;
    code.style.whiteSpace = "nowrap";
    code.style.display = "inline";
    const whole = code.getBoundingClientRect().width;
    code.style.whiteSpace = saved;
    code.style.display = savedDisplay;
    if (whole <= room(code)) {
      problems.push({kind: "identifier split across lines", what: label(code),
                     detail: `${tops.size} lines, though it is ${Math.round(whole)} px and fits in ${Math.round(room(code))} px`});
    }
  }
  return problems;
}
