"""The page's style and script, inlined into every page (no file beside it, no network).

The script is small vanilla JavaScript: tables sort on a click on a column's head, filter
on the text typed above them, and show their first rows with the rest on demand, rendered
from the JSON array each table carries (`table.py`), so thousands of rows cost nothing until
asked for. Text is put in with `textContent`: a name in the data is never read as HTML.
"""

# the page's frame: header, contents, sections (not in a notebook's output)
PAGE_CSS = """
:root{--fg:#1d2330;--muted:#5b6477;--line:#d9dee8;--bg:#fff;--accent:#1f4fd1;--soft:#f4f6fa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:var(--fg);background:var(--bg)}
header.top{padding:18px 28px 10px;border-bottom:1px solid var(--line);background:var(--soft)}
header.top h1{font-size:21px;margin:0 0 4px}
header.top .sub{color:var(--muted);margin:0}
nav.toc{padding:6px 28px;border-bottom:1px solid var(--line);position:sticky;top:0;
background:#fffffff0;z-index:2;font-size:13px}
nav.toc a{margin-right:14px;color:var(--accent);text-decoration:none;white-space:nowrap}
main{padding:8px 28px 40px;max-width:1180px}
section{border-bottom:1px solid var(--line);padding:6px 0 18px}
section h2{font-size:18px;margin:16px 0 6px}
section h3{font-size:15px;margin:14px 0 4px}
footer{color:var(--muted);font-size:12px;padding:10px 28px}
"""

# what a section's body uses (in a notebook's output too)
PARTS_CSS = """
.nsys2prv{--fg:#1d2330;--muted:#5b6477;--line:#d9dee8;--accent:#1f4fd1;--soft:#f4f6fa}
p.lead{margin:4px 0 10px}
p.note,.missing{color:var(--muted)}
.missing{background:var(--soft);border-left:3px solid #f0b400;padding:8px 12px;margin:8px 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px 0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
ol.findings{padding-left:22px;margin:8px 0}
ol.findings li{margin:4px 0}
ol.findings a{color:var(--fg);text-decoration:none;border-bottom:1px dotted var(--accent)}
ol.findings .num{font-weight:600}
.figure{margin:8px 0;overflow-x:auto}
svg.chart{display:block;max-width:100%;height:auto}
svg.chart .title{font-weight:600}
svg.chart .grid{stroke:#e3e7ef;stroke-width:1}
svg.chart .diag{stroke:#bbb;stroke-dasharray:4 3}
svg.chart text{fill:#333;font-family:inherit}
svg.chart text.flame{fill:#222;pointer-events:none}
.tbl{margin:8px 0 14px}
.tbl .tools{display:flex;gap:10px;align-items:center;margin:4px 0;font-size:12px;color:var(--muted)}
.tbl input{font:inherit;padding:2px 6px;border:1px solid var(--line);border-radius:3px;width:220px}
.tbl .wrap{overflow-x:auto}
table.data{border-collapse:collapse;font-size:12.5px}
table.data th,table.data td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:right;
white-space:nowrap}
table.data th{background:var(--soft);cursor:pointer;user-select:none;position:relative}
table.data th.text,table.data td.text{text-align:left}
table.data th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}
table.data th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
table.data tr.flag td{background:#fff1f0}
button.more{font:inherit;font-size:12px;margin-top:4px;padding:2px 10px;border:1px solid var(--line);
background:var(--soft);border-radius:3px;cursor:pointer}
ul.cfgs{margin:4px 0;padding-left:20px;font-size:13px}
ul.cfgs code{background:var(--soft);padding:0 4px}
p.para{background:var(--soft);padding:10px 14px;border-left:3px solid var(--accent)}
.verdict{font-weight:600}
"""

CSS = PAGE_CSS + PARTS_CSS

JS = r"""
(function(){
"use strict";
var STEP=500;
function rowsOf(box){
  if(!box._rows){box._rows=JSON.parse(box.querySelector("script.rows").textContent);
    box._view=box._rows.slice();}
  return box._rows;
}
function cell(c,kind){
  var td=document.createElement("td");
  if(kind==="text")td.className="text";
  td.textContent=c[0];
  if(c.length>2)td.title=c[2];
  return td;
}
function render(box,count){
  var tbody=box.querySelector("tbody"),kinds=box._kinds,view=box._view;
  while(tbody.firstChild)tbody.removeChild(tbody.firstChild);
  var n=Math.min(count,view.length),frag=document.createDocumentFragment();
  for(var i=0;i<n;i++){
    var tr=document.createElement("tr"),r=view[i],m=kinds.length;
    if(r.length>m&&r[m])tr.className="flag";
    for(var j=0;j<m;j++)tr.appendChild(cell(r[j],kinds[j]));
    frag.appendChild(tr);
  }
  tbody.appendChild(frag);
  box._shown=n;
  var more=box.querySelector("button.more"),left=view.length-n;
  if(more){more.hidden=left<=0;more.textContent="show "+Math.min(left,STEP)+" more of "+left;}
  box.querySelector(".count").textContent=view.length+" of "+box._rows.length+" rows";
}
function compare(a,b){
  var x=a[1],y=b[1];
  if(x===null||x===undefined)return (y===null||y===undefined)?0:1;
  if(y===null||y===undefined)return -1;
  if(typeof x==="number"&&typeof y==="number")return x-y;
  return String(x).localeCompare(String(y));
}
function setup(box){
  box._kinds=JSON.parse(box.getAttribute("data-kinds"));
  box._shown=box.querySelectorAll("tbody tr").length;
  var ths=box.querySelectorAll("th");
  Array.prototype.forEach.call(ths,function(th,j){
    th.addEventListener("click",function(){
      var rows=rowsOf(box),dir=th.getAttribute("aria-sort")==="ascending"?-1:1;
      Array.prototype.forEach.call(ths,function(o){o.removeAttribute("aria-sort");});
      th.setAttribute("aria-sort",dir>0?"ascending":"descending");
      var order=rows.map(function(r,i){return i;});
      order.sort(function(p,q){var c=compare(rows[p][j],rows[q][j]);
        if(c===0)return p-q;
        var nulls=rows[p][j][1]===null||rows[q][j][1]===null;
        return nulls?c:c*dir;});
      box._rows=order.map(function(i){return rows[i];});
      filter(box);
    });
  });
  var input=box.querySelector("input");
  if(input)input.addEventListener("input",function(){rowsOf(box);filter(box);});
  var more=box.querySelector("button.more");
  if(more)more.addEventListener("click",function(){rowsOf(box);
    render(box,box._shown+STEP);});
}
function filter(box){
  var input=box.querySelector("input"),q=input?input.value.toLowerCase():"";
  var m=box._kinds.length;
  box._view=q?box._rows.filter(function(r){for(var j=0;j<m;j++){
      if(String(r[j][0]).toLowerCase().indexOf(q)>=0||(r[j].length>2&&
         String(r[j][2]).toLowerCase().indexOf(q)>=0))return true;}return false;})
    :box._rows.slice();
  render(box,Math.max(box._fold,Math.min(box._shown,box._view.length)));
}
function init(){
  Array.prototype.forEach.call(document.querySelectorAll("div.tbl"),function(box){
    if(box.getAttribute("data-ready"))return;  // a notebook runs the script once per output
    box.setAttribute("data-ready","1");
    box._fold=parseInt(box.getAttribute("data-fold"),10)||20;
    setup(box);
  });
}
if(document.readyState==="loading")document.addEventListener("DOMContentLoaded",init);
else init();
})();
"""
