"""Fakes of real wire protocols on loopback: the code under test talks to them through its real SDKs."""
