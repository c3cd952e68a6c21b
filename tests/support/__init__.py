"""Test helpers that are real servers, not mocks."""
