"""A report over squares, built on shapes."""

from pkg.shapes import Shape, square_area


class Square(Shape):
    def __init__(self, side: float) -> None:
        self.side = side

    def area(self) -> float:
        return square_area(self.side)


def total(squares: list[Square]) -> float:
    return sum(s.area() for s in squares)
