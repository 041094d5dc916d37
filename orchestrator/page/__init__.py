"""The run as one page for a browser: `runs/RUN_ID/report.html` (report), the pipeline drawing
(pipeline) and each attempt's diff (diffs)."""

from orchestrator.page.pipeline import Pipeline
from orchestrator.page.report import PAGE_NAME, render_page, write_page

__all__ = ["PAGE_NAME", "Pipeline", "render_page", "write_page"]
