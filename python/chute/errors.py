"""The exception a bad sample raises."""


class SampleError(RuntimeError):
    """A sample that could not be loaded: which one, where it lives, and why.

    Attributes: ``index`` (in the source), ``path``, ``reason``, ``epoch``.
    """

    def __init__(self, index: int, path: str, reason: str, epoch: int = 0):
        super().__init__(f"sample {index} ({path}): {reason}")
        self.index = index
        self.path = path
        self.reason = reason
        self.epoch = epoch

    def __reduce__(self):
        return type(self), (self.index, self.path, self.reason, self.epoch)
