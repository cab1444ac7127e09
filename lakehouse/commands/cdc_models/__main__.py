"""`python -m lakehouse.commands.cdc_models`: writes the demo's CDC models from the templates
(after a change to a template or to DEMO_STREAMS), and names the files it changed."""

from lakehouse.commands.cdc_models import REPO, demo_models

for path, text in demo_models().items():
    target = REPO / path
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
        print(f"wrote {path}")
