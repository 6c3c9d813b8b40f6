"""The stage contract: what a stage is and what it hands back to the engine.

* :mod:`~cleanpipe.contract.stage`: :class:`Stage` and its three shapes (``TextStage``,
  ``BatchStage``, ``GlobalStage``); every name below is importable from it too;
* :mod:`~cleanpipe.contract.findings`: :class:`Action`, :class:`Findings` and the results
  a stage returns; :mod:`~cleanpipe.contract.batch_context`: what a batch stage may ask
  about its batch;
* :mod:`~cleanpipe.contract.sequence_stage`: the base of the stages that render and
  tokenize a row as a trainer would;
* :mod:`~cleanpipe.contract.decisions` and :mod:`~cleanpipe.contract.decided`: a global
  stage's decisions as a table, computed in one place and applied in another;
* :mod:`~cleanpipe.contract.text_fields`: a text stage run over a batch's text fields, the
  one way the engine and a stage used on its own both run it;
* :mod:`~cleanpipe.contract.standalone`: one stage used on its own (a ``str``, a list, an
  Arrow array, a polars Series, a ``datasets`` batch).

Nothing is imported here, so that using one stage loads only what that stage needs.
"""
