"""Reports read from run directories and deployed tasks: ``detection`` (the detection table
of a scenario set, ``fedchain report``) and ``status`` (``fedchain status``: a deployed task's
contract views).
"""
