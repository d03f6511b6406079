"""Cycle profile (being written)."""


def profile_from_function(f):
    raise NotImplementedError


def write_profile_report(doc, out_dir):
    raise NotImplementedError
