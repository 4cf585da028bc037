"""Regenerate screenshots/*.svg from the scenes in tests/scenes.py.

    python -m tests.make_screenshots
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.scenes import SCENES, SIZE, make_scene_app

OUT = Path(__file__).resolve().parent.parent / "screenshots"


async def shoot(name: str) -> Path:
    app = make_scene_app()
    async with app.run_test(size=SIZE) as pilot:
        await SCENES[name](pilot)
        path = app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
    return Path(path)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name in SCENES:
        print(asyncio.run(shoot(name)))


if __name__ == "__main__":
    main()
