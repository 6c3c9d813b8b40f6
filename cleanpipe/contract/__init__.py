"""The stage contract: what a stage is and what it hands back to the engine.

* :mod:`~cleanpipe.contract.stage`: :class:`Stage` and its three shapes (``TextStage``,
  ``BatchStage``, ``GlobalStage``), :class:`Action`, :class:`Findings` and the results;
* :mod:`~cleanpipe.contract.sequence_stage`: the base of the stages that render and
  tokenize a row as a trainer would;
* :mod:`~cleanpipe.contract.decisions` and :mod:`~cleanpipe.contract.decided`: a global
  stage's decisions as a table, computed in one place and applied in another.

Nothing is imported here, so that using one stage loads only what that stage needs.
"""
