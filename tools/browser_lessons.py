"""THE table of lesson widgets for the browser test and ``make screenshots`` (edit only here).

One row per lesson: which notebook, which widget is its main widget, how to move it, and the
exact state its callback must show after the move. Convention for lesson authors: the main
widget's callback puts one hidden state ``key=value key=value ...`` (deterministic: no timings,
no addresses) into an Output widget shown in the same cell as the widget, as
``lmlessons.widgets.display.state_output(state)``: ``<div class="lmlessons-state"
data-state="key=value ..." hidden></div>``, which the browser test reads and a learner never sees.

How to fill a row (see ``tools/browser.py`` for the widget kinds):

- ``Slider(label, presses=N, key="ArrowRight")``: the slider whose description label is ``label``;
  its handle is focused and ``key`` pressed N times (one ``step`` each; "ArrowLeft" goes down).
- ``TextInput(label, text)``: the Text box labelled ``label`` is filled with ``text`` + Enter.
- ``Dropdown(label, option)``: the Dropdown labelled ``label`` is set to the option ``option``.
- ``Toggle(label, option)``: in the ToggleButtons labelled ``label``, the button ``option``
  is clicked.
- ``expected``: the whole state after the move, e.g.
  ``"mlm_probability=0.30 seed=0"``. It must differ from every state shown before the
  move (the test checks), so the test can fail.

A row whose notebook does not exist yet is skipped; a notebook that exists but whose row is
still ``TODO`` fails the test ("lesson without a browser check").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.browser import NOTEBOOKS_DIR, Dropdown, Slider, TextInput, Toggle, WidgetSpec

__all__ = ["LESSONS", "Lesson", "Slider", "TextInput", "Dropdown", "Toggle"]


@dataclass(frozen=True)
class Lesson:
    """One lesson's browser check. ``notebook`` may be a glob such as ``"03_*.ipynb"`` until
    the file name is settled."""

    notebook: str
    widget: WidgetSpec | None = None
    expected: str | None = None

    @property
    def number(self) -> str:
        return self.notebook[:2]

    @property
    def is_todo(self) -> bool:
        return self.widget is None or self.expected is None

    def resolve(self, notebooks_dir: Path = NOTEBOOKS_DIR) -> Path | None:
        """The notebook file, or None when it does not exist (yet)."""
        matches = sorted(notebooks_dir.glob(self.notebook))
        if len(matches) > 1:
            raise ValueError(
                f"lesson pattern {self.notebook!r} matches several notebooks: "
                f"{[m.name for m in matches]}"
            )
        return matches[0] if matches else None


TODO = None  # a row not filled in yet

# fmt: off
LESSONS: list[Lesson] = [
    #      notebook                   main widget and how to move it   state after the move
    Lesson("00_start_here.ipynb",     Slider("example", presses=1),    # example 0 -> 1
           "example=1 objective=MLM seed=0 tokens=17 targets=3"),
    Lesson("01_mlm_masking.ipynb",    Slider("mlm_probability", presses=1),  # 0.15 -> 0.20
           "mlm_probability=0.20 mask_replace_prob=0.80 random_replace_prob=0.10 seed=0 "
           "sentence=0 selected=4 mask=3 random=1 kept=0"),
    Lesson("02_mlm_loss.ipynb",       TextInput("sentence", "it rained all [mask] day ."),
           "masks=1 top1=the text=it rained all [MASK] day ."),
    Lesson("03_clm_label_shift.ipynb", Slider("position", presses=1),  # position 3 -> 4
           "position=4 sees=5 predicts=ball sees_answer=False"),
    Lesson("04_bert_as_decoder.ipynb", Slider("position", presses=1),  # position 3 -> 4
           "is_decoder=True position=4 sees=5 predicts=ball sees_answer=False"),
    Lesson("05_nsp_pairs.ipynb",      Slider("nsp_probability", presses=1),  # 0.50 -> 0.55
           "nsp_probability=0.55 pair=0 label=NotNext notnext_rate=0.56"),
    Lesson("06_combined_loss.ipynb",  Slider("mlm_weight", presses=1),  # 1.00 -> 1.10
           "mlm_weight=1.10 nsp_weight=1.00 loss=9.354 mlm_grad_share=0.999"),
    # the page's first vocab_size slider: Llama 2's 32,000 -> GPT-2's 50,257 (chunk_size 1024)
    Lesson("07_loss_at_scale.ipynb",  Slider("vocab_size", presses=1),
           "vocab_size=50257 chunk_size=1024 peak_MiB=717 dense_MiB=9944"),
    Lesson("08_bug_zoo.ipynb",        Dropdown("case", "case B"),    # case A -> B
           "case=B diagnosis=none verdict=none answered=0 right=0"),
    Lesson("09_packing_and_perplexity.ipynb", Slider("position", presses=1),
           "layout=flattened position=10 document=1 sees=4 target=427 sees_other_documents=False"),
    Lesson("10_answer_only.ipynb",    Toggle("train on", "completion only"),
           "train_on=completion_only pad_is_eos=False targets=2 prompt_targets=0 eos_targets=1"),
    Lesson("11_preference_losses.ipynb", Toggle("beta", "0.5"),  # beta 0.1 -> 0.5
           "beta=0.5 loss_types=sigmoid,ipo,hinge"),
    Lesson("12_rl_losses.ipynb",      Toggle("reward", "longer"),  # shorter -> longer
           "experiment=longer loss_types=grpo,bnpo,dr_grpo,dapo"),
    Lesson("13_rl_accumulation_and_kl.ipynb", Toggle("steps_per_generation", "4"),  # 2 -> 4
           "steps_per_generation=4 gradient_accumulation_steps=2 windows=2"),
    Lesson("14_router_losses.ipynb",  Toggle("model", "bias_1e-2"),  # none -> bias_1e-2
           "model=bias_1e-2 tokens=13"),
    Lesson("15_zloss_and_mtp.ipynb",  Slider("depth", presses=1),  # depth 3 -> 4
           "depth=4 counts=8,7,6,5"),
]
# fmt: on
