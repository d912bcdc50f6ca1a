"""`nsys2prv paraver-setup`: the views and workspaces installed for wxparaver."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..views.workspace import METRICS_NAME, NAME, SAMPLES_NAME, apply, plan
from .common import Parser


def main(argv: Sequence[str] | None = None) -> int:
    """`nsys2prv paraver-setup`: install the cfgs and the nsys2prv workspaces for Paraver."""
    ap = Parser(
        prog="nsys2prv paraver-setup",
        description="Install the nsys2prv views (cfgs) and the 'nsys2prv' workspaces, so that "
                    "wxparaver's Hints menu offers the views on nsys2prv traces. Existing "
                    "workspaces are kept (a backup of the file is made when it changes).")
    ap.add_argument("--dry-run", action="store_true", help="print what would be done, write "
                    "nothing")
    ap.add_argument("--user-dir", type=Path, default=None,
                    help="Paraver user directory (default ~/.paraver)")
    ap.add_argument("--paraver-home", type=Path, default=None,
                    help="install for every user of this Paraver installation instead "
                         "($PARAVER_HOME: cfgs/nsys2prv and share/workspaces.xml)")
    args = ap.parse_args(argv)
    p = plan(args.user_dir, args.paraver_home)
    verb = "would write" if args.dry_run else "wrote"
    n_total = len(list(p.cfg_dir.rglob("*.cfg"))) if p.cfg_dir.exists() else 0
    if args.dry_run:
        print(f"cfgs: {len(p.cfgs)} to write under {p.cfg_dir}")
        for path in sorted(p.cfgs):
            print(f"  {path}")
    else:
        backup = apply(p)
        print(f"cfgs: {verb} {len(p.cfgs)} under {p.cfg_dir} "
              f"({max(n_total, len(p.cfgs))} present)")
    if p.workspaces_text is None:
        print(f"workspaces: {p.workspaces_file} already has the nsys2prv workspaces")
    elif args.dry_run:
        print(f"workspaces: would add/update '{NAME}', '{METRICS_NAME}' and '{SAMPLES_NAME}' in "
              f"{p.workspaces_file} (other workspaces kept, previous file backed up)")
    else:
        print(f"workspaces: added/updated '{NAME}', '{METRICS_NAME}' and '{SAMPLES_NAME}' in "
              f"{p.workspaces_file}"
              + (f" (previous file: {backup})" if backup else ""))
    return 0
