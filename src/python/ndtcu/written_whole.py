"""Files written whole, as ndtcu writes its own (include/ndtcu/output_file.hpp): the bytes go
to a new temporary file in the destination's folder, renamed onto the destination once the
`with` block ends without an exception. A reader sees the old file or all of the new one; a
script stopped half-way leaves the old one; a link planted at the destination is replaced,
never written through.

    from ndtcu.written_whole import written_whole
    with written_whole("out/frames.csv") as f:
        f.write("...")
"""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def written_whole(path, mode="w"):
    folder, name = os.path.split(path)
    # ".NAME.ndtcu-tmp.XXXXXX": the name ndtcu gives its temporary files, which a later run
    # into the folder removes (ndtcu::is_output_temporary).
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.ndtcu-tmp.")
    try:
        with os.fdopen(fd, mode) as f:
            # mkstemp makes the file private (0600); the result gets a new file's usual mode.
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(f.fileno(), 0o666 & ~umask)
            yield f
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
