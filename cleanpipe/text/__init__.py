"""Text machinery the character stages are built from (not stages themselves).

* :mod:`~cleanpipe.text.byte_scan`: one compiled pass over UTF-8 bytes naming candidates;
* :mod:`~cleanpipe.text.rules`: rule sets (code, RE2 pattern, rewrite) run over Arrow arrays;
* :mod:`~cleanpipe.text.ftfy_safe`: which texts ftfy provably leaves unchanged;
* :mod:`~cleanpipe.text.token_scan`: finding and stripping literal token strings;
* :mod:`~cleanpipe.text.arrays`: masks, writes at positions and before/after snippets.

Nothing is imported here: each stage imports only the modules it uses.
"""
