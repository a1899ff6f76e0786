"""Suite `attrs`: attribute and opset variants the official data misses."""


def gen(w, torch):
    pass
